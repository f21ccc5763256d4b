#!/usr/bin/env bash
# An S3-compatible server for Tern's tests and benchmarks: moto's server
# (PyPI `moto[server]`, pinned), installed into a venv under
# ~/.cache/tern-s3, on a free loopback port. In-memory: a restart starts empty.
#
#   scripts/s3.sh start [--dir DIR]   starts it, waits until it answers, prints the endpoint URL
#                                     (also in DIR/endpoint); credentials: any (use test/test)
#   scripts/s3.sh stop [--dir DIR]    stops it
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MOTO_VERSION=5.2.5
VENV="${TERN_S3_CACHE:-$HOME/.cache/tern-s3}/venv-$MOTO_VERSION"
DIR="${TMPDIR:-/tmp}/tern-s3"
READY_TIMEOUT_S=60

command="${1:-}"; shift || true
while (($#)); do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    *) echo "s3.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

install() {
  if [[ -x "$VENV/bin/moto_server" ]]; then return; fi
  echo "s3.sh: installing moto[server]==$MOTO_VERSION into $VENV" >&2
  python3 -m venv "$VENV" >&2 || { apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$VENV"; }
  "$VENV/bin/pip" install -q "moto[server]==$MOTO_VERSION" >&2
}

# A free loopback port outside the ephemeral range (see scripts/lib/free_ports.py).
free_port() { python3 "$ROOT/scripts/lib/free_ports.py" 1; }

start() {
  install
  mkdir -p "$DIR"
  if [[ -f "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
    echo "s3.sh: already running in $DIR; stop it first" >&2; exit 1
  fi
  local port; port=$(free_port)
  ( exec "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$DIR/server.log" 2>&1 ) &
  echo $! > "$DIR/pid"
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until curl -sf "http://127.0.0.1:$port/" >/dev/null 2>&1; do
    if ((SECONDS > deadline)) || ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
      echo "s3.sh: server did not start; see $DIR/server.log" >&2; stop; exit 1
    fi
    sleep 0.2
  done
  echo "http://127.0.0.1:$port" > "$DIR/endpoint"
  cat "$DIR/endpoint"
}

stop() {
  [[ -f "$DIR/pid" ]] || return 0
  local pid; pid=$(cat "$DIR/pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$DIR/pid"
}

case "$command" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/s3.sh start|stop [--dir DIR]" >&2; exit 2 ;;
esac
