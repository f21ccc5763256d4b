#!/usr/bin/env bash
# Installs what Tern needs on a fresh Debian machine. Idempotent and quick
# when everything is present.
#   scripts/setup.sh build    what building `tern` needs (scripts/dev.sh)
#   scripts/setup.sh          that and what the test command needs
#   scripts/setup.sh bench    also the benchmark peers (etcd-server) and matplotlib
set -euo pipefail
mode="${1:-test}"
case "$mode" in build | test | bench) ;; *) echo "setup: unknown mode $mode (build, test or bench)" >&2; exit 2 ;; esac

need_apt=()
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)
command -v cc >/dev/null || need_apt+=(build-essential)
command -v cmake >/dev/null || need_apt+=(cmake)
# librdkafka (built from source by the rdkafka crate) includes curl's headers.
[[ -f /usr/include/x86_64-linux-gnu/curl/curl.h || -f /usr/include/curl/curl.h ]] || need_apt+=(libcurl4-openssl-dev)
[[ -f /usr/include/zlib.h ]] || need_apt+=(zlib1g-dev)
# librdkafka's TLS and SASL (rdkafka's `ssl` feature) link the system's OpenSSL.
[[ -f /usr/include/openssl/ssl.h ]] || need_apt+=(libssl-dev pkg-config)
# Packaging (scripts/package.sh) and its test: strip, dpkg-deb.
command -v strip >/dev/null || need_apt+=(binutils)
if [[ "$mode" != "build" ]]; then
command -v java >/dev/null || need_apt+=(default-jre-headless)
command -v mvn >/dev/null || need_apt+=(maven)
# scripts/s3.sh: the S3 test server lives in a Python venv and is probed with curl.
command -v curl >/dev/null || need_apt+=(curl)
command -v openssl >/dev/null || need_apt+=(openssl)  # test certificate authorities (tests/it/tls.rs)
command -v ip >/dev/null || need_apt+=(iproute2)  # network namespaces for link cuts (tests/it/net_faults.rs)
python3 -c "import venv, ensurepip" 2>/dev/null || need_apt+=(python3-venv)
# The TypeScript client's tests (Node 20+) and its browser test (Debian's chromium).
command -v node >/dev/null || need_apt+=(nodejs npm)
command -v chromium >/dev/null || need_apt+=(chromium)
# The Go client's tests (clients/go).
command -v go >/dev/null || need_apt+=(golang-go)
# The Debian package's test verifies its unit with systemd-analyze.
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
# promtool checks and unit-tests the alert rules (deploy/prometheus).
command -v promtool >/dev/null || need_apt+=(prometheus)
fi
if [[ "$mode" == "bench" ]]; then
  command -v etcd >/dev/null || need_apt+=(etcd-server)
fi
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Install packages without starting their services (prometheus would
  # start a server on every interface): policy-rc.d refuses them.
  policy=/usr/sbin/policy-rc.d
  made_policy=false
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=true
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
  if $made_policy; then
    rm -f "$policy"
    trap - EXIT
  fi
fi
if [[ "$mode" == "bench" ]] && ! python3 -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib" >&2
  python3 -m pip install -q matplotlib
fi
if [[ "$mode" != "build" ]] && ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
  echo "setup: Node.js 20 or newer is required for clients/typescript (found $(node --version))" >&2
  exit 1
fi
if ! command -v cargo >/dev/null; then
  echo "setup: cargo (Rust stable, 1.85 or newer) is required and not installed" >&2
  exit 1
fi
# The test command formats and lints (cargo fmt, cargo clippy).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null; then
    echo "setup: installing the rustfmt and clippy components" >&2
    rustup component add rustfmt clippy
  else
    echo "setup: cargo fmt and cargo clippy are required (rustup component add rustfmt clippy)" >&2
    exit 1
  fi
fi
