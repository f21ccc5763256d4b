#!/usr/bin/env bash
# Builds the Debian package of this build's `tern` with dpkg-deb:
#   scripts/package.sh [OUT_DIR]   (default $CARGO_TARGET_DIR/debian)
# Prints the .deb's path. The binary is the release build's, stripped of
# debug info; Depends is read off the libraries it links (dpkg -S).
# packaging/deb/ holds the unit, the default config and the maintainer
# scripts; scripts/test-package.sh installs the result into a scratch root.
set -euo pipefail
cd "$(dirname "$0")/.."
# Modes in the package are the files' own, whatever the caller's umask.
umask 022
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tern-target}"
BIN="$CARGO_TARGET_DIR/release/tern"
# Up to date with the sources (quick when it is): never a stale binary.
cargo build --release --quiet -p tern --bin tern
OUT="${1:-$CARGO_TARGET_DIR/debian}"
VERSION="$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)"
ARCH="$(dpkg --print-architecture)"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/tern-deb.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
chmod 0755 "$STAGE"

install -D -m 0755 "$BIN" "$STAGE/usr/bin/tern"
strip --strip-debug "$STAGE/usr/bin/tern"
install -D -m 0644 packaging/deb/tern.service "$STAGE/lib/systemd/system/tern.service"
install -D -m 0644 packaging/deb/tern.toml "$STAGE/etc/tern/tern.toml"
install -D -m 0644 packaging/deb/default "$STAGE/etc/default/tern"
install -D -m 0644 LICENSE "$STAGE/usr/share/doc/tern/copyright"
install -D -m 0644 README.md "$STAGE/usr/share/doc/tern/README.md"
for doc in docs/*.md; do install -D -m 0644 "$doc" "$STAGE/usr/share/doc/tern/$doc"; done
gzip -9n -c CHANGELOG.md > "$STAGE/usr/share/doc/tern/changelog.gz"
# Shell completions, from the binary itself.
mkdir -p "$STAGE/usr/share/bash-completion/completions" "$STAGE/usr/share/zsh/vendor-completions" "$STAGE/usr/share/fish/vendor_completions.d"
"$STAGE/usr/bin/tern" completions bash > "$STAGE/usr/share/bash-completion/completions/tern"
"$STAGE/usr/bin/tern" completions zsh > "$STAGE/usr/share/zsh/vendor-completions/_tern"
"$STAGE/usr/bin/tern" completions fish > "$STAGE/usr/share/fish/vendor_completions.d/tern.fish"

# Depends: the packages of the shared libraries the binary links.
depends="$(ldd "$STAGE/usr/bin/tern" | awk '/=> \// { print $3 }' | while read -r lib; do
  dpkg -S "$(realpath "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')"
[[ -n "$depends" ]] || { echo "package.sh: could not tell the packages of the binary's libraries" >&2; exit 1; }

mkdir -p "$STAGE/DEBIAN"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$STAGE/DEBIAN/"
printf '/etc/tern/tern.toml\n/etc/default/tern\n' > "$STAGE/DEBIAN/conffiles"
cat > "$STAGE/DEBIAN/control" <<CONTROL
Package: tern
Version: $VERSION
Architecture: $ARCH
Maintainer: Tern developers <tern@localhost>
Depends: $depends, passwd
Section: database
Priority: optional
Homepage: https://github.com/tern-db/tern
Installed-Size: $(du -sk "$STAGE" | cut -f1)
Description: replicated, realtime key-value database for configuration data
 Tern keeps read-heavy configuration data (DNS records, routing, feature
 flags, certificates, shared app state) in a shared log (Apache Kafka, or an
 embedded log on one machine); every replica serves reads locally and pushes
 changes to subscribers in order. It speaks its own HTTP API and Firebase's
 protocols. This package installs the tern binary, a systemd unit (tern.service,
 enabled, not started) and a default configuration in /etc/tern/tern.toml.
CONTROL
mkdir -p "$OUT"
DEB="$OUT/tern_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group --build "$STAGE" "$DEB" >/dev/null
echo "$DEB"
