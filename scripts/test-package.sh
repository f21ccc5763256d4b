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
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null; rm -rf "$ROOT"; }
trap cleanup EXIT
checks=0
check() { # check WHAT COMMAND...: counts a check, or fails saying WHAT
  local what="$1"; shift
  if "$@"; then checks=$((checks + 1)); else echo "package: FAILED: $what" >&2; exit 1; fi
}

# A root dpkg can install into: its database, and the account files useradd
# edits; traversable, as / is (the service's user reads its config there).
chmod 0755 "$ROOT"
mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates" "$ROOT/etc"
touch "$ROOT/var/lib/dpkg/status" "$ROOT/var/lib/dpkg/available"
for f in passwd group shadow gshadow login.defs; do [[ -e /etc/$f ]] && cp -p "/etc/$f" "$ROOT/etc/$f"; done
# The host's accounts may hold a tern user already: the root's must not.
sed -i '/^tern:/d' "$ROOT/etc/passwd" "$ROOT/etc/group" "$ROOT/etc/shadow" "$ROOT/etc/gshadow" 2>/dev/null || true
# The root holds no other package: its Depends are not met there (said on
# stderr, kept for a failure's report).
dpkg_root() { dpkg --root="$ROOT" --force-script-chrootless --force-depends --log=/dev/null "$@" 2>>"$ROOT/dpkg.log" || { cat "$ROOT/dpkg.log" >&2; return 1; }; }

check "the package's metadata" bash -c "dpkg-deb --field '$DEB' Package Version Depends | grep -q '^Package: tern'"
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
if command -v systemd-analyze >/dev/null; then
  # The unit as systemd reads it: every complaint about a line of it names
  # the file and the line (the scratch root has no other unit, such as
  # sysinit.target, so the exit status says nothing).
  check "systemd-analyze verify" bash -c "systemd-analyze verify --root='$ROOT' /lib/systemd/system/tern.service 2>&1 | (! grep -E 'tern\.service:[0-9]+:')"
fi

# Start it as the service would: its user, its config (the paths moved into the root).
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
setpriv --reuid="$uid" --regid="$gid" --clear-groups "$ROOT/usr/bin/tern" serve --config "$ROOT/etc/tern/tern.toml" \
  --data-dir "$ROOT/var/lib/tern" --snapshots "file://$ROOT/var/lib/tern/snapshots" --listen "127.0.0.1:$port" \
  > "$ROOT/tern.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$ROOT/tern.log" >&2; echo "package: FAILED: tern serve exited" >&2; exit 1; }
  sleep 0.1
done
check "ready" curl -sf "http://127.0.0.1:$port/readyz" -o /dev/null
check "a write" curl -sf -X PUT "http://127.0.0.1:$port/v1/ns/default/kv/pkg/check?wait=applied" -d '"installed"' -o /dev/null
check "a read" bash -c "curl -sf 'http://127.0.0.1:$port/v1/ns/default/kv/pkg/check' | grep -q '\"installed\"'"
check "files of the tern user" test "$(find "$ROOT/var/lib/tern" -mindepth 1 ! -uid "$uid" | wc -l)" = 0
kill -TERM "$PID"
check "a clean stop" wait "$PID"
PID=""

dpkg_root -r tern >/dev/null
check "removed: no binary" test ! -e "$ROOT/usr/bin/tern"
check "removed: config and data kept" test -f "$ROOT/etc/tern/tern.toml" -a -d "$ROOT/var/lib/tern"
dpkg_root -P tern >/dev/null
check "purged: no config" test ! -e "$ROOT/etc/tern/tern.toml"
check "purged: no data" test ! -e "$ROOT/var/lib/tern"
check "purged: no user" bash -c "! grep -q '^tern:' '$ROOT/etc/passwd'"
echo "package: $checks checks passed"
