#!/usr/bin/env bash
# A three-region test bed on loopback: per region one Kafka broker (its
# `broker.rack` is the region) and one or more Tern nodes (their `--region`
# and replica group are the region), every link between two regions through
# a latency-injecting proxy, links inside a region direct.
#
#   scripts/regions.sh up [--delay-ms N] [--delay A:B=N ...] [--regions A,B,C] [--nodes-per-region N]
#                         [--dir DIR] [-- TERN_SERVE_ARGS...]
#       starts the bed (one-way delay N ms between regions, 30 by default; --delay sets one pair's)
#       and prints one line per Tern node: REGION NODE_ID http://127.0.0.1:PORT
#       (also in DIR/nodes; DIR/bed.json describes everything: brokers, bootstraps, proxies)
#   scripts/regions.sh cut REGION [--dir DIR]    cuts every link between REGION and the others
#   scripts/regions.sh heal REGION [--dir DIR]   restores them
#   scripts/regions.sh delay MS [--dir DIR]      sets every link's one-way delay to MS (0: none), running
#   scripts/regions.sh down [--dir DIR]          stops everything `up` started
#
# The links, and what carries them:
# - Kafka client -> broker and broker -> broker: each broker has one listener
#   per region (`R1`, `R2`, ...). A client of region k bootstraps from its own
#   broker's `Rk` listener and so learns every broker's `Rk` address: direct
#   for its own broker, a proxy `k -> broker` for the others. Broker i
#   replicates over `inter.broker.listener.name=Ri`, so through the same proxies.
# - KRaft controller traffic: each broker lists the other voters at proxy addresses.
# - Tern node -> node HTTP (forwarding, round-trip probes): each node advertises
#   per region the address that region reaches it at (`advertise_api_for`).
# - Tern gossip (UDP, which Toxiproxy does not carry): through
#   scripts/regions/udp_relay.py, the same delays and cuts (`gossip_advertise`).
# TCP links go through Toxiproxy (Shopify's; built with `go install` into
# ~/.cache/tern-tools). A delay is a `latency` toxic on both directions; a cut
# is a `timeout` toxic of 0 on both directions: the link holds connections and
# drops their bytes (a black hole, as a lost region looks), and closes them when healed.
set -euo pipefail
cd "$(dirname "$0")/.."

TOXIPROXY_VERSION=v2.12.0
TOOLS="${TERN_TOOLS_CACHE:-$HOME/.cache/tern-tools}"
TOXIPROXY="$TOOLS/toxiproxy-$TOXIPROXY_VERSION"
DIR="${TMPDIR:-/tmp}/tern-regions"
REGIONS="us-east,eu-west,ap-south"
DELAY_MS=30
NODES_PER_REGION=1
PAIR_DELAYS=()
TERN_ARGS=()
READY_TIMEOUT_S=120
STOP_TIMEOUT_S=20

command="${1:-}"; shift || true
REGION_ARG=""
if [[ "$command" == cut || "$command" == heal ]]; then REGION_ARG="${1:?usage: regions.sh $command REGION}"; shift; fi
if [[ "$command" == delay ]]; then REGION_ARG="${1:?usage: regions.sh delay MS}"; shift; fi
while (($#)); do
  case "$1" in
    --delay-ms) DELAY_MS="$2"; shift 2 ;;
    --delay) PAIR_DELAYS+=("$2"); shift 2 ;;
    --regions) REGIONS="$2"; shift 2 ;;
    --nodes-per-region) NODES_PER_REGION="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --) shift; TERN_ARGS=("$@"); break ;;
    *) echo "regions.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a REGION_LIST <<<"$REGIONS"

say() { echo "regions.sh: $*" >&2; }

install_toxiproxy() {
  [[ -x "$TOXIPROXY" ]] && return
  local go
  go=$(command -v go || echo /usr/local/go/bin/go)
  if [[ ! -x "$go" ]]; then
    say "installing Go (for toxiproxy)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
    go=$(command -v go)
  fi
  say "building toxiproxy $TOXIPROXY_VERSION with go install"
  mkdir -p "$TOOLS/gobin"
  GOBIN="$TOOLS/gobin" "$go" install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2
  mv "$TOOLS/gobin/server" "$TOXIPROXY"
}

tern_binary() {
  if [[ -n "${TERN_BIN:-}" ]]; then echo "$TERN_BIN"; return; fi
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
  scripts/setup.sh >&2
  cargo build --release --quiet --bin tern >&2
  echo "$CARGO_TARGET_DIR/release/tern"
}

# N free loopback ports (TCP and UDP), one per line, outside the ephemeral
# range so no client's outgoing connection takes one before its service binds it.
free_ports() { python3 scripts/lib/free_ports.py "$1"; }

# The last lines of a log, and its errors, to stderr: a failed `up` says why.
show_log() {
  [[ -f "$1" ]] || return 0
  say "--- $1: errors, then the last lines"
  grep -E ' (ERROR|FATAL) |panicked|error:' "$1" | tail -n 10 >&2 || true
  tail -n 20 "$1" >&2
}

# Fails `up` (with the logs of whatever died) if a process it started is gone.
check_alive() {
  local name pid
  while read -r name pid; do
    kill -0 "$pid" 2>/dev/null && continue
    say "$name (pid $pid) exited during startup"
    show_log "$DIR/$name.log"; show_log "$DIR/$name.out"
    show_log "$DIR/broker-${name#broker}.log"; show_log "$DIR/broker-${name#broker}.out"
    down; exit 1
  done < "$DIR/pids"
}

# One-way delay between regions $1 and $2.
delay_between() {
  local pair
  for pair in "${PAIR_DELAYS[@]}"; do
    local regions="${pair%%=*}" ms="${pair#*=}"
    if [[ "$regions" == "$1:$2" || "$regions" == "$2:$1" ]]; then echo "$ms"; return; fi
  done
  echo "$DELAY_MS"
}

toxi() { curl -sf -X "$1" "http://$(cat "$DIR/toxiproxy.api")$2" ${3:+-H 'Content-Type: application/json' -d "$3"} >/dev/null; }

# A proxy named $1 on port $2 to 127.0.0.1:$3 with $4 ms each way.
make_proxy() {
  toxi POST /proxies "{\"name\":\"$1\",\"listen\":\"127.0.0.1:$2\",\"upstream\":\"127.0.0.1:$3\",\"enabled\":true}" \
    || { say "toxiproxy could not create proxy $1 on port $2"; show_log "$DIR/toxiproxy.log"; down; exit 1; }
  if (($4 > 0)); then
    toxi POST "/proxies/$1/toxics" "{\"name\":\"delay_up\",\"type\":\"latency\",\"stream\":\"upstream\",\"attributes\":{\"latency\":$4}}"
    toxi POST "/proxies/$1/toxics" "{\"name\":\"delay_down\",\"type\":\"latency\",\"stream\":\"downstream\",\"attributes\":{\"latency\":$4}}"
  fi
  echo "$1 $5 $6" >> "$DIR/proxies"
}

up() {
  if [[ -f "$DIR/pids" ]]; then say "a bed runs in $DIR; run down first"; exit 1; fi
  install_toxiproxy
  local libs tern
  libs=$(scripts/kafka.sh libs)
  tern=$(tern_binary)
  rm -rf "$DIR"; mkdir -p "$DIR"; : > "$DIR/pids"; : > "$DIR/proxies"; : > "$DIR/cut"; : > "$DIR/nodes"
  local r=${#REGION_LIST[@]} n=$NODES_PER_REGION
  local -a ports
  mapfile -t ports < <(free_ports $((1 + r * r + r + r * (r - 1) * 2 + r * n * (3 + (r - 1)))))
  local next=0
  echo "${ports[0]}" > "$DIR/toxiproxy.port"; next=1
  echo "127.0.0.1:${ports[0]}" > "$DIR/toxiproxy.api"
  "$TOXIPROXY" -host 127.0.0.1 -port "${ports[0]}" >"$DIR/toxiproxy.log" 2>&1 &
  echo "toxiproxy $!" >> "$DIR/pids"
  local deadline=$((SECONDS + 30))
  until curl -sf "http://$(cat "$DIR/toxiproxy.api")/version" >/dev/null; do
    ((SECONDS < deadline)) || { say "toxiproxy did not start; see $DIR/toxiproxy.log"; down; exit 1; }
    sleep 0.2
  done

  # Ports: broker i's listener for region k, its controller, and the proxies.
  local i k
  declare -A listener controller kafka_proxy controller_proxy
  for ((i = 0; i < r; i++)); do
    for ((k = 0; k < r; k++)); do listener[$i,$k]=${ports[$next]}; next=$((next + 1)); done
    controller[$i]=${ports[$next]}; next=$((next + 1))
  done
  for ((i = 0; i < r; i++)); do
    for ((k = 0; k < r; k++)); do
      ((i == k)) && continue
      kafka_proxy[$k,$i]=${ports[$next]}; next=$((next + 1))
      controller_proxy[$k,$i]=${ports[$next]}; next=$((next + 1))
      local d; d=$(delay_between "${REGION_LIST[$k]}" "${REGION_LIST[$i]}")
      make_proxy "kafka_${REGION_LIST[$k]}_to_broker$((i + 1))" "${kafka_proxy[$k,$i]}" "${listener[$i,$k]}" "$d" "${REGION_LIST[$k]}" "${REGION_LIST[$i]}"
      make_proxy "controller_${REGION_LIST[$k]}_to_broker$((i + 1))" "${controller_proxy[$k,$i]}" "${controller[$i]}" "$d" "${REGION_LIST[$k]}" "${REGION_LIST[$i]}"
    done
  done

  # Brokers: node.id i+1 in region i.
  cat > "$DIR/log4j2.properties" <<'LOG'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.node.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
LOG
  local cluster_id
  cluster_id=$(java -cp "$libs/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" -Dkafka.node.log="$DIR/tools.log" kafka.tools.StorageTool random-uuid)
  for ((i = 0; i < r; i++)); do
    local listeners="" advertised="" protocols="CONTROLLER:PLAINTEXT" voters="" v
    for ((k = 0; k < r; k++)); do
      listeners+="R$((k + 1))://127.0.0.1:${listener[$i,$k]},"
      if ((k == i)); then advertised+="R$((k + 1))://127.0.0.1:${listener[$i,$k]},"
      else advertised+="R$((k + 1))://127.0.0.1:${kafka_proxy[$k,$i]},"; fi
      protocols+=",R$((k + 1)):PLAINTEXT"
    done
    for ((v = 0; v < r; v++)); do
      if ((v == i)); then voters+="${voters:+,}$((v + 1))@127.0.0.1:${controller[$v]}"
      else voters+="${voters:+,}$((v + 1))@127.0.0.1:${controller_proxy[$i,$v]}"; fi
    done
    cat > "$DIR/broker-$((i + 1)).properties" <<PROPS
process.roles=broker,controller
node.id=$((i + 1))
broker.rack=${REGION_LIST[$i]}
controller.quorum.voters=$voters
listeners=${listeners}CONTROLLER://127.0.0.1:${controller[$i]}
advertised.listeners=${advertised%,}
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
inter.broker.listener.name=R$((i + 1))
# KIP-392: consumers fetch from a replica in their own rack (client.rack = region).
replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector
log.dirs=$DIR/broker-$((i + 1))-data
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
auto.create.topics.enable=false
# Region loss: the controller fences a silent broker after 4 s (default 9 s)
# and takes it out of every ISR, so acks=all writes go on with the others.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=500
replica.lag.time.max.ms=5000
# A follower learns a new high watermark in its next fetch from the leader;
# consumers reading from it (KIP-392) see a write only then. The default
# (500 ms) made a write visible in another region half a second late.
replica.fetch.wait.max.ms=50
PROPS
    java -cp "$libs/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" -Dkafka.node.log="$DIR/tools.log" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$DIR/broker-$((i + 1)).properties" >/dev/null
    (exec java -Xms256m -Xmx640m -cp "$libs/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" \
      -Dkafka.node.log="$DIR/broker-$((i + 1)).log" kafka.Kafka "$DIR/broker-$((i + 1)).properties" \
      >>"$DIR/broker-$((i + 1)).out" 2>&1) &
    echo "broker$((i + 1)) $!" >> "$DIR/pids"
    echo "127.0.0.1:${listener[$i,$i]}" > "$DIR/bootstrap-${REGION_LIST[$i]}"
  done
  deadline=$((SECONDS + READY_TIMEOUT_S))
  until (($(java -cp "$libs/*" -Dlog4j2.configurationFile="$DIR/log4j2.properties" -Dkafka.node.log="$DIR/tools.log" \
      org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$(cat "$DIR/bootstrap-${REGION_LIST[0]}")" 2>/dev/null \
      | grep -c '(id: ' || true) >= r)); do
    check_alive
    if ((SECONDS >= deadline)); then
      say "brokers not ready after ${READY_TIMEOUT_S}s; logs in $DIR/broker-*.log"
      for ((i = 1; i <= r; i++)); do show_log "$DIR/broker-$i.log"; done
      down; exit 1
    fi
    sleep 1
  done

  # Tern nodes: api, gossip and relay ports, and a proxy from every other region.
  local -a node_ids node_regions node_api node_gossip node_relay
  local j
  for ((i = 0; i < r; i++)); do
    for ((j = 1; j <= n; j++)); do
      node_ids+=("${REGION_LIST[$i]}-$j"); node_regions+=("$i")
      node_api+=("${ports[$next]}"); node_gossip+=("${ports[$((next + 1))]}"); node_relay+=("${ports[$((next + 2))]}")
      next=$((next + 3))
    done
  done
  local relay_nodes=""
  for ((j = 0; j < ${#node_ids[@]}; j++)); do
    relay_nodes+="${relay_nodes:+,}{\"region\":\"${REGION_LIST[${node_regions[$j]}]}\",\"gossip\":${node_gossip[$j]},\"relay\":${node_relay[$j]}}"
  done
  local delays="" a b
  for ((a = 0; a < r; a++)); do for ((b = a + 1; b < r; b++)); do
    delays+="${delays:+,}\"${REGION_LIST[$a]}|${REGION_LIST[$b]}\":$(delay_between "${REGION_LIST[$a]}" "${REGION_LIST[$b]}")"
  done; done
  echo "{\"nodes\":[$relay_nodes],\"delay_ms\":{$delays},\"cut_file\":\"$DIR/cut\"}" > "$DIR/udp_relay.json"
  python3 scripts/regions/udp_relay.py "$DIR/udp_relay.json" >"$DIR/udp_relay.log" 2>&1 &
  echo "udp_relay $!" >> "$DIR/pids"
  local seed="127.0.0.1:${node_relay[0]}"
  for ((j = 0; j < ${#node_ids[@]}; j++)); do
    local id=${node_ids[$j]} home=${node_regions[$j]} advertise=()
    for ((k = 0; k < r; k++)); do
      ((k == home)) && continue
      local port=${ports[$next]}; next=$((next + 1))
      make_proxy "api_${REGION_LIST[$k]}_to_$id" "$port" "${node_api[$j]}" "$(delay_between "${REGION_LIST[$k]}" "${REGION_LIST[$home]}")" \
        "${REGION_LIST[$k]}" "${REGION_LIST[$home]}"
      advertise+=(--advertise-api-for "${REGION_LIST[$k]}=127.0.0.1:$port")
    done
    local seeds=()
    ((j > 0)) && seeds=(--seeds "$seed")
    (exec "$tern" serve --node-id "$id" --listen "127.0.0.1:${node_api[$j]}" --data-dir "$DIR/$id" \
      --log "kafka://$(cat "$DIR/bootstrap-${REGION_LIST[$home]}")" --region "${REGION_LIST[$home]}" \
      --group "${REGION_LIST[$home]}" --gossip "127.0.0.1:${node_gossip[$j]}" \
      --gossip-advertise "127.0.0.1:${node_relay[$j]}" "${seeds[@]}" "${advertise[@]}" "${TERN_ARGS[@]}" \
      >>"$DIR/$id.log" 2>&1) &
    echo "$id $!" >> "$DIR/pids"
    echo "${REGION_LIST[$home]} $id http://127.0.0.1:${node_api[$j]}" >> "$DIR/nodes"
  done
  deadline=$((SECONDS + READY_TIMEOUT_S))
  local url
  for url in $(awk '{print $3}' "$DIR/nodes"); do
    until curl -sf "$url/readyz" >/dev/null; do
      check_alive
      if ((SECONDS >= deadline)); then
        say "$url not ready after ${READY_TIMEOUT_S}s; logs in $DIR/*.log"
        show_log "$DIR/$(awk -v u="$url" '$3 == u {print $2}' "$DIR/nodes").log"
        down; exit 1
      fi
      sleep 0.5
    done
  done
  write_bed_json
  cat "$DIR/nodes"
}

# DIR/bed.json: regions, bootstrap per region, brokers' regions, nodes, proxies, toxiproxy's API.
write_bed_json() {
  python3 - "$DIR" "$REGIONS" <<'PY'
import json, sys, os
d, regions = sys.argv[1], sys.argv[2].split(",")
nodes = [dict(zip(("region", "id", "url"), l.split())) for l in open(f"{d}/nodes") if l.strip()]
proxies = [dict(zip(("name", "from", "to"), l.split())) for l in open(f"{d}/proxies") if l.strip()]
bed = {
    "regions": regions,
    "bootstrap": {r: open(f"{d}/bootstrap-{r}").read().strip() for r in regions},
    "brokers": {str(i + 1): r for i, r in enumerate(regions)},
    "nodes": nodes,
    "proxies": proxies,
    "toxiproxy": open(f"{d}/toxiproxy.api").read().strip(),
}
json.dump(bed, open(f"{d}/bed.json", "w"), indent=1)
PY
}

# Every proxy between $1 and another region: its name.
links_of() { awk -v r="$1" '$2 == r || $3 == r {print $1}' "$DIR/proxies"; }

cut() {
  [[ -f "$DIR/proxies" ]] || { say "no bed in $DIR"; exit 1; }
  grep -qx "$1" "$DIR/cut" && { say "$1 is already cut"; return; }
  local name
  for name in $(links_of "$1"); do
    toxi POST "/proxies/$name/toxics" '{"name":"cut_up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}'
    toxi POST "/proxies/$name/toxics" '{"name":"cut_down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}'
  done
  echo "$1" >> "$DIR/cut"
  say "cut $1 from the other regions"
}

heal() {
  [[ -f "$DIR/proxies" ]] || { say "no bed in $DIR"; exit 1; }
  local name
  for name in $(links_of "$1"); do
    toxi DELETE "/proxies/$name/toxics/cut_up" || true
    toxi DELETE "/proxies/$name/toxics/cut_down" || true
  done
  grep -vx "$1" "$DIR/cut" > "$DIR/cut.new" || true
  mv "$DIR/cut.new" "$DIR/cut"
  say "healed $1"
}

# Every link's one-way delay, changed on the running bed: the latency toxics
# of every proxy (created if the bed started without delay) and the gossip
# relay's table (it rereads it with the cut file).
set_delay() {
  [[ -f "$DIR/proxies" ]] || { say "no bed in $DIR"; exit 1; }
  [[ "$1" =~ ^[0-9]+$ ]] || { say "delay must be a number of ms, got $1"; exit 2; }
  local name toxic stream
  for name in $(awk '{print $1}' "$DIR/proxies"); do
    for toxic in delay_up:upstream delay_down:downstream; do
      stream=${toxic#*:}; toxic=${toxic%%:*}
      toxi POST "/proxies/$name/toxics/$toxic" "{\"attributes\":{\"latency\":$1}}" 2>/dev/null \
        || toxi POST "/proxies/$name/toxics" "{\"name\":\"$toxic\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$1}}"
    done
  done
  python3 - "$DIR/udp_relay.json" "$1" <<'PY2'
import json, os, sys
path, ms = sys.argv[1], int(sys.argv[2])
config = json.load(open(path))
config["delay_ms"] = {pair: ms for pair in config["delay_ms"]}
json.dump(config, open(path + ".new", "w"))
os.replace(path + ".new", path)
PY2
  say "every link's one-way delay is now $1 ms"
}

down() {
  [[ -f "$DIR/pids" ]] || return 0
  local name pid
  # Tern nodes first (they leave gossip), then brokers, then the proxies.
  tac "$DIR/pids" | while read -r name pid; do kill -TERM "$pid" 2>/dev/null || true; done
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  while read -r name pid; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done < "$DIR/pids"
  rm -f "$DIR/pids"
}

case "$command" in
  up) up ;;
  cut) cut "$REGION_ARG" ;;
  heal) heal "$REGION_ARG" ;;
  delay) set_delay "$REGION_ARG" ;;
  down) down ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
