#!/usr/bin/env bash
# redis72.sh: a server with Redis 7.2's WAITAOF for the store's tests
# (IDEMPOTENCY_WAIT_AOF), on a Debian machine whose own redis-server is
# older: Debian 13 (trixie)'s Valkey 8 (a fork of Redis 7.2 that answers
# redis_version 7.2.x) and the libraries it runs on, unpacked from their
# .deb files into one folder, never installed into the system.
#
#   $NW_CACHE_DIR/redis72/bin/valkey-server   runs the server (arguments as redis-server's)
#   $NW_CACHE_DIR/redis72/bin/valkey-cli      runs its client
#   $NW_CACHE_DIR/redis72/root/               the unpacked packages
#
# NW_CACHE_DIR defaults to ~/.cache/notification-worker, as in
# scripts/kafka-jars.sh; adapters/redis/redistest looks there.
#
# trixie's glibc is newer than this machine's, so the wrappers start the
# server through trixie's own dynamic loader, with trixie's libraries only.
# The packages come from the Debian mirror this machine's apt sources name
# (read from /etc/apt), through apt with a configuration, package lists and
# cache of its own, in a temporary folder: the machine's apt sources, lists
# and installed packages are left as they were. No root needed.
#
# Idempotent: when the server is there and answers --version, nothing is
# fetched and it returns at once. FORCE=1 fetches again.
set -euo pipefail

say() { printf 'redis72: %s\n' "$*" >&2; }

CACHE_DIR=${NW_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/notification-worker}
OUT=$CACHE_DIR/redis72
SUITE=trixie

if [ "${FORCE:-0}" != 1 ] && v=$("$OUT/bin/valkey-server" --version 2>/dev/null); then
  say "cached in $OUT: $v"
  echo "$OUT"
  exit 0
fi

[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] || { say "needs Debian on amd64"; exit 1; }

# The Debian archive's URI: the first source serving this machine's release
# (its main suite, not -updates or -security), in deb822 .sources files or
# one-line .list files.
# shellcheck disable=SC1091
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
uri=$(
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v want="$codename" '
      function flush() { if (uris != "" && (" " suites " ") ~ (" " want " ") && (" " types " ") ~ / deb /) { split(uris, u, " "); print u[1]; exit } uris = suites = types = "" }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "uris:"   { $1 = ""; uris = $0 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      tolower($1) == "types:"  { $1 = ""; types = $0 " " }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/\[[^]]*\]//' "$f" | awk -v want="$codename" '$1 == "deb" && $3 == want { print $2; exit }'
  done
)
uri=$(printf '%s\n' "$uri" | head -1)
[ -n "$uri" ] || { say "no apt source for Debian $codename in /etc/apt: cannot tell which Debian mirror to use"; exit 1; }
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { say "$keyring missing (package debian-archive-keyring)"; exit 1; }

start=$SECONDS
mkdir -p "$CACHE_DIR"
tmp=$(mktemp -d "$CACHE_DIR/redis72.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs" "$tmp/out/root" "$tmp/out/bin"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' "$uri" "$SUITE" "$keyring" >"$tmp/trixie.sources"
apt=(-o Dir::Etc::sourcelist="$tmp/trixie.sources" -o Dir::Etc::sourceparts=/dev/null
  -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o Dir::State::status=/dev/null
  -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)"
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false)
say "fetching Valkey from Debian $SUITE ($uri)"
apt-get "${apt[@]}" -qq update >&2

# The server binary is in valkey-tools (valkey-server is its symlink); its
# run-time libraries are its lib* dependencies and theirs, which include
# trixie's libc6 and its loader. adduser and init-system-helpers, the rest
# of its dependencies, serve only a system-wide install.
libs=$(apt-cache "${apt[@]}" depends valkey-tools | awk '$1 == "Depends:" && $2 ~ /^lib/ { print $2 }')
pkgs=$(apt-cache "${apt[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances $libs | grep -v '^[ <]' | sort -u)
# shellcheck disable=SC2086
(cd "$tmp/debs" && apt-get "${apt[@]}" -qq download valkey-server valkey-tools $pkgs >&2)
for deb in "$tmp"/debs/*.deb; do
  dpkg-deb -x "$deb" "$tmp/out/root"
done
(cd "$tmp/debs" && ls) >"$tmp/out/PACKAGES"

for prog in valkey-server valkey-cli; do
  cat >"$tmp/out/bin/$prog" <<EOF
#!/bin/sh
# $prog from Debian $SUITE, run by its own loader and libraries (scripts/redis72.sh).
r="\$(cd "\$(dirname "\$0")/../root" && pwd)"
exec "\$r/usr/lib64/ld-linux-x86-64.so.2" --library-path "\$r/usr/lib/x86_64-linux-gnu:\$r/lib/x86_64-linux-gnu" "\$r/usr/bin/$prog" "\$@"
EOF
  chmod +x "$tmp/out/bin/$prog"
done
v=$("$tmp/out/bin/valkey-server" --version) || { say "the unpacked valkey-server does not run"; exit 1; }

rm -rf "$OUT"
mv "$tmp/out" "$OUT"
say "$v in $OUT ($(wc -l <"$OUT/PACKAGES") packages, $(du -sh "$OUT/root" | cut -f1)), in $((SECONDS - start))s"
echo "$OUT"
