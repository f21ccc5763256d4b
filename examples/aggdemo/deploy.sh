#!/usr/bin/env bash
# Usage: examples/aggdemo/deploy.sh URL NS INPUT_TOPIC [--staleness-ms MS] [--qtycount N] [--usage N]
#
# Creates namespace NS on the existing Kafka topic INPUT_TOPIC (its log: its
# partitions are the namespace's), deploys the aggdemo procedure on it, and
# so writes its outputs to the topics NS.aggregated and NS.bad (JSON, one
# object per message), exactly once (read them with isolation.level=read_committed).
#
# URL is a Tern node (http://127.0.0.1:7070). With auth on, set TERN_TOKEN
# to an admin token of NS. Needs curl and base64. Exits non-zero, saying
# why, when Tern refuses a step.
set -euo pipefail

usage() {
  echo "usage: $0 URL NS INPUT_TOPIC [--staleness-ms MS] [--qtycount N] [--usage N]" >&2
  exit 2
}
(($# >= 3)) || usage
url=${1%/}; ns=$2; topic=$3; shift 3
staleness_ms=3600000; qtycount=100; usage_max=1000000
number() { [[ $2 =~ ^[0-9]+$ ]] || { echo "$1 needs a non-negative integer, got '$2'" >&2; exit 2; }; }
while (($#)); do
  case $1 in
    --staleness-ms) (($# >= 2)) || usage; number "$1" "$2"; staleness_ms=$2; shift 2 ;;
    --qtycount) (($# >= 2)) || usage; number "$1" "$2"; qtycount=$2; shift 2 ;;
    --usage) (($# >= 2)) || usage; number "$1" "$2"; usage_max=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
module=$here/build/aggdemo.wasm
[[ -f $module ]] || { echo "$module is missing: run $here/build.sh" >&2; exit 1; }

auth=()
[[ -n ${TERN_TOKEN:-} ]] && auth=(-H "Authorization: Bearer $TERN_TOKEN")

# call METHOD PATH BODY_FILE: prints the answer; fails with it unless 2xx.
call() {
  local out status
  out=$(mktemp)
  status=$(curl -sS -o "$out" -w '%{http_code}' -X "$1" "${auth[@]}" -H 'Content-Type: application/json' --data-binary "@$3" "$url$2") || { rm -f "$out"; exit 1; }
  if [[ $status != 2* ]]; then
    echo "$1 $2: HTTP $status: $(cat "$out")" >&2
    rm -f "$out"
    exit 1
  fi
  cat "$out"; echo
  rm -f "$out"
}

body=$(mktemp)
trap 'rm -f "$body"' EXIT
printf '{"source_topic": "%s"}' "$topic" >"$body"
call PUT "/v1/ns/$ns" "$body"
{
  printf '{"runtime": "wasm", "module": "'
  base64 -w0 "$module"
  printf '", "params": {"staleness_ms": %s, "qtycount": %s, "usage": %s}}' "$staleness_ms" "$qtycount" "$usage_max"
} >"$body"
call PUT "/v1/ns/$ns/procedures/aggdemo" "$body"
echo "aggdemo reads $topic; its outputs go to $ns.aggregated and $ns.bad" >&2
