#!/usr/bin/env bash
# Installs the Debian package into a scratch root with dpkg (its maintainer
# scripts run with DPKG_ROOT set, chrootless), checks what it installed,
# starts `tern serve` from it as the tern user with its own config, writes
# and reads a record, stops it, then removes and purges the package.
#   scripts/test-package.sh DEB
# Exits non-zero, saying what failed; prints "package: N checks passed".
set -euo pipefail
DEB="$1"
ROOT="$(mktemp -d "${TMPDIR:-/tmp}/tern-root.XXXXXX")"
OTHER="$(mktemp -d "${TMPDIR:-/tmp}/tern-root.XXXXXX")"
PID=""
# stop PID: SIGTERM, then at most STOP_WAIT_S for it to exit; its status.
STOP_WAIT_S=60
stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 $((STOP_WAIT_S * 10))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; wait "$1" 2>/dev/null; return 1; fi
  wait "$1"
}
cleanup() { if [[ -n "$PID" ]]; then stop "$PID" || true; fi; rm -rf "$ROOT" "$OTHER"; }
trap cleanup EXIT
checks=0
check() { # check WHAT COMMAND...: counts a check, or fails saying WHAT
  local what="$1"; shift
  if "$@"; then checks=$((checks + 1)); else echo "package: FAILED: $what" >&2; exit 1; fi
}

# make_root DIR: a root dpkg can install into: its database, and the account
# files useradd edits (without any tern account); traversable, as / is.
make_root() {
  chmod 0755 "$1"
  mkdir -p "$1/var/lib/dpkg/info" "$1/var/lib/dpkg/updates" "$1/etc"
  touch "$1/var/lib/dpkg/status" "$1/var/lib/dpkg/available"
  for f in passwd group shadow gshadow login.defs; do if [[ -e /etc/$f ]]; then cp -p "/etc/$f" "$1/etc/$f"; fi; done
  sed -i '/^tern:/d' "$1/etc/passwd" "$1/etc/group" "$1/etc/shadow" "$1/etc/gshadow" 2>/dev/null || true
}
# dpkg_in ROOT ARGS...: the root holds no other package, so its Depends are
# not met there (said on stderr, kept for a failure's report).
dpkg_in() { local root="$1"; shift; dpkg --root="$root" --force-script-chrootless --force-depends --log=/dev/null "$@" 2>>"$root/dpkg.log" || { cat "$root/dpkg.log" >&2; return 1; }; }
dpkg_root() { dpkg_in "$ROOT" "$@"; }
make_root "$ROOT"
make_root "$OTHER"

check "the package's metadata" bash -c "dpkg-deb --field '$DEB' Package Version | grep -q '^Package: tern'"
check "its Depends: the linked libraries' packages" bash -c "dpkg-deb --field '$DEB' Depends | grep -q 'libc6.*libssl3'"
# A tern group made before (by hand, another package) is taken, not a failure.
groupadd --prefix "$ROOT" --system tern
dpkg_root -i "$DEB" >/dev/null
check "the binary" test -x "$ROOT/usr/bin/tern"
check "the unit" test -f "$ROOT/lib/systemd/system/tern.service"
check "the config, a conffile" grep -qx /etc/tern/tern.toml "$ROOT/var/lib/dpkg/info/tern.conffiles"
check "the tern user" grep -q '^tern:' "$ROOT/etc/passwd"
uid="$(awk -F: '$1 == "tern" { print $3 }' "$ROOT/etc/passwd")"
gid="$(awk -F: '$1 == "tern" { print $3 }' "$ROOT/etc/group")"
check "the data directory, the tern user's, 0750" test "$(stat -c '%u:%g %a' "$ROOT/var/lib/tern")" = "$uid:$gid 750"
check "the version" bash -c "'$ROOT/usr/bin/tern' --version | grep -q '^tern '"
check "bash completions" grep -q '_tern' "$ROOT/usr/share/bash-completion/completions/tern"
command -v systemd-analyze >/dev/null || { echo "package: FAILED: systemd-analyze is missing (scripts/setup.sh installs systemd)" >&2; exit 1; }
# The unit as systemd reads it: a complaint about a line names the file and
# the line, one about its binary names the binary (the scratch root has no
# other unit, such as sysinit.target, so the exit status says nothing).
check "systemd-analyze verify" bash -c "systemd-analyze verify --root='$ROOT' /lib/systemd/system/tern.service 2>&1 | (! grep -E 'tern\.service:[0-9]+:|/usr/bin/tern')"
check "the unit's data directory is the config's" bash -c "grep -qx 'ReadWritePaths=/var/lib/tern' '$ROOT/lib/systemd/system/tern.service' && grep -qx 'data_dir = \"/var/lib/tern\"' '$ROOT/etc/tern/tern.toml'"

# Start it as the service would: its user, its config (the paths moved into the root).
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
setpriv --reuid="$uid" --regid="$gid" --clear-groups "$ROOT/usr/bin/tern" serve --config "$ROOT/etc/tern/tern.toml" \
  --data-dir "$ROOT/var/lib/tern" --listen "127.0.0.1:$port" > "$ROOT/tern.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do
  curl -sf --max-time 5 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$ROOT/tern.log" >&2; echo "package: FAILED: tern serve exited" >&2; exit 1; }
  sleep 0.1
done
check "ready" curl -sf --max-time 10 "http://127.0.0.1:$port/readyz" -o /dev/null
check "a write" curl -sf --max-time 30 -X PUT "http://127.0.0.1:$port/v1/ns/default/kv/pkg/check?wait=applied" -d '"installed"' -o /dev/null
check "a read" bash -c "curl -sf --max-time 30 'http://127.0.0.1:$port/v1/ns/default/kv/pkg/check' | grep -q '\"installed\"'"
check "files of the tern user" test "$(find "$ROOT/var/lib/tern" -mindepth 1 ! -uid "$uid" | wc -l)" = 0
check "a clean stop" stop "$PID"
PID=""

dpkg_root -r tern >/dev/null
check "removed: no binary" test ! -e "$ROOT/usr/bin/tern"
check "removed: config and data kept" test -f "$ROOT/etc/tern/tern.toml" -a -d "$ROOT/var/lib/tern"
dpkg_root -P tern >/dev/null
check "purged: no config" test ! -e "$ROOT/etc/tern/tern.toml"
check "purged: no data" test ! -e "$ROOT/var/lib/tern"
check "purged: no user" bash -c "! grep -q '^tern:' '$ROOT/etc/passwd'"

# A tern account that was there before is used, and left alone by purge,
# with what it owns.
groupadd --prefix "$OTHER" --gid 4242 tern
useradd --prefix "$OTHER" --uid 4242 --gid tern --comment "Someone else" --home-dir /home/tern --no-create-home tern
dpkg_in "$OTHER" -i "$DEB" >/dev/null
check "an existing tern user is kept" grep -q '^tern:x:4242:4242:Someone else:' "$OTHER/etc/passwd"
check "its data directory is that user's" test "$(stat -c '%u:%g' "$OTHER/var/lib/tern")" = "4242:4242"
touch "$OTHER/var/lib/tern/theirs"
dpkg_in "$OTHER" -P tern >/dev/null
check "purge leaves a user it did not make" grep -q '^tern:x:4242:' "$OTHER/etc/passwd"
check "and that user's data" test -e "$OTHER/var/lib/tern/theirs"
echo "package: $checks checks passed"
