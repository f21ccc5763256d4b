#!/usr/bin/env bash
# Apache Kafka for Tern's tests and benchmarks: the broker's jars come from
# Maven Central (scripts/kafka/pom.xml), nodes run in KRaft mode (each node is
# broker and controller) on free loopback ports, data in a scratch directory.
#
#   scripts/kafka.sh start [--brokers N] [--dir DIR] [--sasl-ssl]
#                                                      starts N nodes (default 1), waits until ready,
#                                                      prints the bootstrap servers (also in DIR/bootstrap).
#                                                      --sasl-ssl: each node also listens SASL_SSL (PLAIN; user
#                                                      `tern`, password `tern-secret`) with a certificate from a CA
#                                                      made in DIR/tls (DIR/tls/ca.pem); those servers are in
#                                                      DIR/sasl_ssl_bootstrap.
#   scripts/kafka.sh stop [--dir DIR]                  stops them (SIGTERM, then SIGKILL after 20 s)
#   scripts/kafka.sh status [--dir DIR]                lists the nodes and whether they run
#   scripts/kafka.sh run CLASS [ARGS...]               runs a Kafka tool class with the jars on the classpath
#   scripts/kafka.sh stop-node I [--kill] [--dir DIR]  stops node I (SIGTERM, or SIGKILL), keeping its data
#   scripts/kafka.sh start-node I [--dir DIR]          starts node I again with its data and ports, waits
#                                                      until it answers (or shows its log's end and fails)
#   scripts/kafka.sh libs                              fetches the jars, prints their directory (scripts/regions.sh)
#   scripts/kafka.sh start --netns ...                 each node in a network namespace of its own (made here,
#                                                      198.18-19.Z.1I on a bridge whose address is .1), so
#                                                      that links can be cut; needs root and iproute2
#   scripts/kafka.sh cut-node I [--dir DIR]            (--netns) routes nothing between node I and the other
#                                                      nodes (blackhole routes); clients still reach it (issue 36)
#   scripts/kafka.sh heal-node I [--dir DIR]           undoes cut-node
#   scripts/kafka.sh add-host H [--dir DIR]            (--netns) a namespace of its own on the bridge for a client
#                                                      (a Tern node) whose links can be cut: H in 1..99, address
#                                                      .(100+H); prints "NAMESPACE ADDRESS"
#   scripts/kafka.sh cut-link A B [--dir DIR]          (--netns) routes nothing between A and B, each a broker
#                                                      (n1, n2, ...) or a host (h1, ...); heal-link A B undoes it
#
# With N = 3 topics default to replication factor 3 and min.insync.replicas 2.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

KAFKA_VERSION=4.1.1
CACHE="${TERN_KAFKA_CACHE:-$HOME/.cache/tern-kafka}/$KAFKA_VERSION"
LIBS="$CACHE/libs"
DIR="${TMPDIR:-/tmp}/tern-kafka"
BROKERS=1
SASL_SSL=0
NETNS=0
READY_TIMEOUT_S=90
STOP_TIMEOUT_S=20

command="${1:-}"; shift || true
while (($#)); do
  case "$1" in
    --brokers) BROKERS="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --sasl-ssl) SASL_SSL=1; shift ;;
    --netns) NETNS=1; shift ;;
    *) break ;;
  esac
done

fetch_jars() {
  if [[ -f "$CACHE/.complete" ]]; then return; fi
  command -v java >/dev/null || { echo "kafka.sh: java (17+) is required" >&2; exit 1; }
  command -v mvn >/dev/null || { echo "kafka.sh: installing maven" >&2; apt-get update -qq && apt-get install -y -qq maven >/dev/null; }
  echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION from Maven Central into $LIBS" >&2
  mkdir -p "$LIBS"
  mvn -q -f scripts/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
  touch "$CACHE/.complete"
}

kafka_java() { java -Xms256m -Xmx768m -cp "$LIBS/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" "$@"; }
# The same, replacing the calling (sub)shell, so that `$!` of `kafka_exec ... &` is Java's pid.
kafka_exec() { exec java -Xms256m -Xmx768m -cp "$LIBS/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" "$@"; }

# A free loopback port outside the ephemeral range (see scripts/lib/free_ports.py).
free_port() { python3 "$ROOT/scripts/lib/free_ports.py" 1; }

# Node $1's address: loopback, or (--netns) its namespace's.
node_addr() {
  if [[ -f "$DIR/netns" ]]; then echo "$(cut -d' ' -f2 "$DIR/netns").$((10 + $1))"; else echo 127.0.0.1; fi
}

# Node $1's network namespace (--netns), or nothing.
node_ns() {
  if [[ -f "$DIR/netns" ]]; then echo "$(cut -d' ' -f1 "$DIR/netns")-$1"; fi
}

# --netns: a bridge X.Y.Z.1/24 in this namespace and, per node, a namespace
# of its own joined to it by a veth pair. The subnet is taken from
# 198.18.0.0/15 (RFC 2544, for benchmarking: no real network uses it) and
# must have no route here yet; choosing and making it holds a lock, so
# parallel starts never pick the same one. The tag and subnet are in DIR/netns.
make_netns() {
  command -v ip >/dev/null || { echo "kafka.sh: --netns needs iproute2 (ip)" >&2; exit 1; }
  [[ $(id -u) == 0 ]] || { echo "kafka.sh: --netns needs root (it makes network namespaces)" >&2; exit 1; }
  exec 9>"${TMPDIR:-/tmp}/tern-kafka-netns.lock"
  flock 9
  local tag subnet tries=0 i
  while :; do
    tag="tk$(printf '%04x' $((RANDOM % 65536)))"
    subnet="198.$((18 + RANDOM % 2)).$((RANDOM % 256))"
    if [[ -z "$(ip -4 route show match "$subnet.0/24" | grep -v '^default')" ]] \
      && ! ip link show "br-$tag" >/dev/null 2>&1 && ! ip netns list | grep -q "^$tag-"; then
      break
    fi
    tries=$((tries + 1)); ((tries < 50)) || { echo "kafka.sh: no free subnet for --netns" >&2; exit 1; }
  done
  echo "$tag $subnet" > "$DIR/netns"
  ip link add "br-$tag" type bridge
  ip addr add "$subnet.1/24" dev "br-$tag"
  ip link set "br-$tag" up
  flock -u 9
  for ((i = 1; i <= BROKERS; i++)); do join_bridge "$tag" "$i" "$subnet.$((10 + i))"; done
}

# join_bridge TAG NAME ADDR: namespace TAG-NAME, joined to bridge br-TAG by a
# veth pair (h-TAG-NAME here, n-TAG-NAME there), with address ADDR/24.
join_bridge() {
  local tag="$1" name="$2" addr="$3"
  ip netns add "$tag-$name"
  ip link add "h-$tag-$name" type veth peer name "n-$tag-$name"
  ip link set "n-$tag-$name" netns "$tag-$name"
  ip link set "h-$tag-$name" master "br-$tag" up
  ip netns exec "$tag-$name" ip addr add "$addr/24" dev "n-$tag-$name"
  ip netns exec "$tag-$name" ip link set "n-$tag-$name" up
  ip netns exec "$tag-$name" ip link set lo up
}

remove_netns() {
  [[ -f "$DIR/netns" ]] || return 0
  local tag ns
  tag=$(cut -d' ' -f1 "$DIR/netns")
  # The brokers' namespaces and the hosts' (add-host).
  for ns in $(ip netns list | awk '{print $1}' | grep "^$tag-" || true); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "br-$tag" 2>/dev/null || true
  rm -f "$DIR/netns"
}

# add-host H: a namespace TAG-hH joined to the bridge, address .(100+H).
add_host() {
  local h="$1" tag subnet
  [[ -f "$DIR/netns" ]] || { echo "kafka.sh: add-host needs nodes started with --netns" >&2; exit 1; }
  [[ "$h" =~ ^[0-9]+$ ]] && ((h >= 1 && h <= 99)) || { echo "kafka.sh: add-host takes 1..99, got $h" >&2; exit 1; }
  read -r tag subnet < "$DIR/netns"
  join_bridge "$tag" "h$h" "$subnet.$((100 + h))"
  echo "$tag-h$h $subnet.$((100 + h))"
}

# An endpoint's namespace and address: nI (broker I) or hI (add-host I).
# (Checked by check_endpoint first: an exit inside $(...) would leave only the subshell.)
endpoint_ns() {
  if [[ "$1" == n* ]]; then node_ns "${1#n}"; else echo "$(cut -d' ' -f1 "$DIR/netns")-$1"; fi
}
endpoint_addr() {
  if [[ "$1" == n* ]]; then node_addr "${1#n}"; else echo "$(cut -d' ' -f2 "$DIR/netns").$((100 + ${1#h}))"; fi
}
check_endpoint() {
  [[ "$1" =~ ^[nh][0-9]+$ ]] || { echo "kafka.sh: an endpoint is nI (broker I) or hI (add-host I), got $1" >&2; exit 1; }
  ip netns list | awk '{print $1}' | grep -x "$(endpoint_ns "$1")" >/dev/null || { echo "kafka.sh: no namespace for $1" >&2; exit 1; }
}

# cut-link / heal-link: blackhole routes both ways between $2 and $3 ($1: add or del).
route_link() {
  local how="$1" a="$2" b="$3"
  [[ -f "$DIR/netns" ]] || { echo "kafka.sh: cut-link needs nodes started with --netns" >&2; exit 1; }
  check_endpoint "$a"
  check_endpoint "$b"
  ip netns exec "$(endpoint_ns "$a")" ip route "$how" blackhole "$(endpoint_addr "$b")/32"
  ip netns exec "$(endpoint_ns "$b")" ip route "$how" blackhole "$(endpoint_addr "$a")/32"
}

# cut-node / heal-node: blackhole routes between node $2 and every other node ($1: add or del).
route_node() {
  local how="$1" i="$2" j
  [[ -f "$DIR/netns" ]] || { echo "kafka.sh: cut-node needs nodes started with --netns" >&2; exit 1; }
  for ((j = 1; j <= $(cat "$DIR/brokers"); j++)); do
    ((j == i)) && continue
    ip netns exec "$(node_ns "$i")" ip route "$how" blackhole "$(node_addr "$j")/32"
    ip netns exec "$(node_ns "$j")" ip route "$how" blackhole "$(node_addr "$i")/32"
  done
}

write_configs() {
  local voters="" i
  for ((i = 1; i <= BROKERS; i++)); do
    echo "$(free_port)" > "$DIR/node-$i.port"
    echo "$(free_port)" > "$DIR/node-$i.controller-port"
    voters+="${voters:+,}$i@$(node_addr "$i"):$(cat "$DIR/node-$i.controller-port")"
  done
  local rf=$((BROKERS >= 3 ? 3 : 1)) min_isr=$((BROKERS >= 3 ? 2 : 1))
  if ((SASL_SSL)); then make_tls; fi
  cat > "$DIR/log4j2.properties" <<LOG
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
# A tool run without -Dkafka.node.log logs to tools.log (not to a file named
# after the unresolved lookup in the working directory).
appender.file.fileName = \${sys:kafka.node.log:-$DIR/tools.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
LOG
  for ((i = 1; i <= BROKERS; i++)); do
    cat > "$DIR/node-$i.properties" <<PROPS
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://$(node_addr "$i"):$(cat "$DIR/node-$i.port"),CONTROLLER://$(node_addr "$i"):$(cat "$DIR/node-$i.controller-port")$(sasl_ssl_listener "$i")
advertised.listeners=PLAINTEXT://$(node_addr "$i"):$(cat "$DIR/node-$i.port")$(sasl_ssl_listener "$i")
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data-$i
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
group.initial.rebalance.delay.ms=0
# Tests use short session timeouts (a killed member's partitions move sooner).
group.min.session.timeout.ms=1000
# Fewer offsets-topic partitions: the first group join creates them (50 by default).
offsets.topic.num.partitions=4
auto.create.topics.enable=false
PROPS
    if ((SASL_SSL)); then
      cat >> "$DIR/node-$i.properties" <<PROPS
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_tern="tern-secret";
ssl.keystore.type=PEM
ssl.keystore.location=$DIR/tls/broker.keystore.pem
PROPS
    fi
  done
}

# With --sasl-ssl: `,SASL_SSL://127.0.0.1:PORT` of node $1 (its port chosen once).
sasl_ssl_listener() {
  ((SASL_SSL)) || return 0
  [[ -f "$DIR/node-$1.sasl-port" ]] || free_port > "$DIR/node-$1.sasl-port"
  echo ",SASL_SSL://127.0.0.1:$(cat "$DIR/node-$1.sasl-port")"
}

# A CA and one broker certificate for 127.0.0.1 (every node presents it), as a PEM keystore.
make_tls() {
  command -v openssl >/dev/null || { echo "kafka.sh: openssl is required for --sasl-ssl" >&2; exit 1; }
  mkdir -p "$DIR/tls"
  (
    cd "$DIR/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 7 -subj /CN=tern-test-kafka-ca 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout broker.key -out broker.csr -subj /CN=broker 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem -days 7 -extfile broker.ext 2>/dev/null
    cat broker.key broker.pem > broker.keystore.pem
  )
}

bootstrap() {
  local servers="" i
  for ((i = 1; i <= BROKERS; i++)); do servers+="${servers:+,}$(node_addr "$i"):$(cat "$DIR/node-$i.port")"; done
  echo "$servers"
}

start() {
  fetch_jars
  if [[ -f "$DIR/bootstrap" ]] && status >/dev/null 2>&1; then
    echo "kafka.sh: already running in $DIR; stop it first" >&2; exit 1
  fi
  if [[ -f "$DIR/netns" ]]; then remove_netns; fi
  rm -rf "$DIR"; mkdir -p "$DIR"
  echo "$BROKERS" > "$DIR/brokers"
  # Whatever fails from here stops what was started and removes the namespaces.
  trap 'stop' ERR
  if ((NETNS)); then
    if ((SASL_SSL)); then echo "kafka.sh: --netns and --sasl-ssl do not go together" >&2; exit 1; fi
    make_netns
  fi
  write_configs
  local cluster_id i
  cluster_id=$(kafka_java kafka.tools.StorageTool random-uuid)
  for ((i = 1; i <= BROKERS; i++)); do
    kafka_java -Dkafka.node.log="$DIR/node-$i.log" kafka.tools.StorageTool format \
      -t "$cluster_id" -c "$DIR/node-$i.properties" >/dev/null
    start_node "$i"
  done
  local servers deadline=$((SECONDS + READY_TIMEOUT_S))
  servers=$(bootstrap)
  until kafka_java -Dkafka.node.log="$DIR/tools.log" org.apache.kafka.tools.BrokerApiVersionsCommand \
      --bootstrap-server "$servers" >/dev/null 2>&1 && ready_nodes "$servers"; do
    if ((SECONDS > deadline)); then
      echo "kafka.sh: not ready after ${READY_TIMEOUT_S}s; logs in $DIR/node-*.log" >&2; stop; exit 1
    fi
    sleep 1
  done
  if ((SASL_SSL)); then
    local sasl="" j
    for ((j = 1; j <= BROKERS; j++)); do sasl+="${sasl:+,}127.0.0.1:$(cat "$DIR/node-$j.sasl-port")"; done
    echo "$sasl" > "$DIR/sasl_ssl_bootstrap"
  fi
  echo "$servers" > "$DIR/bootstrap"
  trap - ERR
  echo "$servers"
}

start_node() {
  local i="$1" ns
  ns=$(node_ns "$i")
  if [[ -n "$ns" ]]; then
    # `ip netns exec` execs the command: `$!` is still Java's pid.
    (exec ip netns exec "$ns" java -Xms256m -Xmx768m -cp "$LIBS/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" \
      -Dkafka.node.log="$DIR/node-$i.log" kafka.Kafka "$DIR/node-$i.properties") >>"$DIR/node-$i.out" 2>&1 &
  else
    kafka_exec -Dkafka.node.log="$DIR/node-$i.log" kafka.Kafka "$DIR/node-$i.properties" \
      >>"$DIR/node-$i.out" 2>&1 &
  fi
  echo $! > "$DIR/node-$i.pid"
}

stop_node() {
  local i="$1" signal="$2" pid
  pid=$(cat "$DIR/node-$i.pid")
  kill "-$signal" "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

# Waits until node I (started again) answers as a broker, at most
# READY_TIMEOUT_S; else shows the end of its output and log, and fails.
wait_node() {
  local i="$1" deadline=$((SECONDS + READY_TIMEOUT_S)) addr
  addr="$(node_addr "$i"):$(cat "$DIR/node-$i.port")"
  until kafka_java -Dkafka.node.log="$DIR/tools.log" org.apache.kafka.tools.BrokerApiVersionsCommand \
      --bootstrap-server "$addr" 2>/dev/null | grep "(id: $i " >/dev/null; do
    if ((SECONDS > deadline)) || ! kill -0 "$(cat "$DIR/node-$i.pid")" 2>/dev/null; then
      echo "kafka.sh: node $i did not answer at $addr within ${READY_TIMEOUT_S}s (or exited)" >&2
      tail -n 20 "$DIR/node-$i.out" "$DIR/node-$i.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
}

# True when every node answers as a broker.
ready_nodes() {
  local answered
  answered=$(kafka_java -Dkafka.node.log="$DIR/tools.log" org.apache.kafka.tools.BrokerApiVersionsCommand \
    --bootstrap-server "$1" 2>/dev/null | grep -c '(id: ' || true)
  ((answered >= BROKERS))
}

stop() {
  local pid_file pid
  for pid_file in "$DIR"/node-*.pid; do
    [[ -f "$pid_file" ]] || continue
    pid=$(cat "$pid_file")
    kill -TERM "$pid" 2>/dev/null || true
  done
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  for pid_file in "$DIR"/node-*.pid; do
    [[ -f "$pid_file" ]] || continue
    pid=$(cat "$pid_file")
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pid_file"
  done
  rm -f "$DIR/bootstrap"
  remove_netns
}

status() {
  local pid_file running=0 total=0
  for pid_file in "$DIR"/node-*.pid; do
    [[ -f "$pid_file" ]] || continue
    total=$((total + 1))
    if kill -0 "$(cat "$pid_file")" 2>/dev/null; then running=$((running + 1)); echo "$(basename "$pid_file" .pid): running"; else echo "$(basename "$pid_file" .pid): stopped"; fi
  done
  [[ -f "$DIR/bootstrap" ]] && echo "bootstrap: $(cat "$DIR/bootstrap")"
  ((total > 0 && running == total))
}

case "$command" in
  start) start ;;
  stop-node)
    node="$1"; signal=TERM; shift
    while (($#)); do case "$1" in --kill) signal=KILL; shift ;; --dir) DIR="$2"; shift 2 ;; *) shift ;; esac; done
    stop_node "$node" "$signal" ;;
  start-node)
    node="$1"; shift
    while (($#)); do case "$1" in --dir) DIR="$2"; shift 2 ;; *) shift ;; esac; done
    start_node "$node"
    wait_node "$node" ;;
  cut-node|heal-node)
    node="$1"; shift
    while (($#)); do case "$1" in --dir) DIR="$2"; shift 2 ;; *) shift ;; esac; done
    if [[ "$command" == cut-node ]]; then route_node add "$node"; else route_node del "$node"; fi ;;
  add-host)
    host="$1"; shift
    while (($#)); do case "$1" in --dir) DIR="$2"; shift 2 ;; *) shift ;; esac; done
    add_host "$host" ;;
  cut-link|heal-link)
    a="$1" b="$2"; shift 2
    while (($#)); do case "$1" in --dir) DIR="$2"; shift 2 ;; *) shift ;; esac; done
    if [[ "$command" == cut-link ]]; then route_link add "$a" "$b"; else route_link del "$a" "$b"; fi ;;
  stop) stop ;;
  status) status ;;
  libs) fetch_jars; echo "$LIBS" ;;
  run) fetch_jars; kafka_java -Dkafka.node.log="$DIR/tools.log" "$@" ;;
  *) sed -n '2,29p' "$0" >&2; exit 2 ;;
esac
