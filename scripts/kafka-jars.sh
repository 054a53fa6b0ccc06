#!/usr/bin/env bash
# kafka-jars.sh: fetch the Apache Kafka broker's jars from Maven Central, as
# integration/pom.xml lists them, into the cache folder the image builds use.
#
#   $NW_CACHE_DIR/kafka-<version>/jars/   the resolved jars (broker, tools, log4j2)
#   $NW_CACHE_DIR/kafka-<version>/SHA256SUMS  one line per jar
#   $NW_CACHE_DIR/m2/                     Maven's local repository for this
#
# Prints the folder on stdout and, on stderr, one digest over SHA256SUMS: the
# same pom resolves to the same digest on every machine, so a changed digest
# means a changed dependency set.
#
# Idempotent: when the jars were resolved from the same pom (its digest is
# kept beside them), nothing is fetched and it returns at once. FORCE=1
# resolves again. Needs Java and Maven (scripts/deps.sh installs them).
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'kafka-jars: %s\n' "$*" >&2; }

POM=integration/pom.xml
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")
CACHE_DIR=${NW_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/notification-worker}
OUT=$CACHE_DIR/kafka-$VERSION
pom_digest=$(sha256sum "$POM" | cut -d' ' -f1)

if [ "${FORCE:-0}" != 1 ] && [ -f "$OUT/pom.sha256" ] && [ "$(cat "$OUT/pom.sha256")" = "$pom_digest" ] &&
  (cd "$OUT/jars" && sha256sum --quiet -c ../SHA256SUMS) >/dev/null 2>&1; then
  say "Apache Kafka $VERSION jars are cached in $OUT/jars ($(ls "$OUT/jars" | wc -l) jars, set $(sha256sum <"$OUT/SHA256SUMS" | cut -d" " -f1))"
  echo "$OUT"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { say "mvn not found: run scripts/deps.sh (Maven and a JDK 17)"; exit 1; }

start=$SECONDS
say "resolving Apache Kafka $VERSION from $POM"
tmp=$OUT.tmp
rm -rf "$tmp"
mkdir -p "$tmp/jars" "$CACHE_DIR/m2"
# -B and -q: no progress bars, only errors. includeScope=runtime is what the
# broker needs at run time (compile + runtime), without test or provided jars.
mvn -B -q -Dstyle.color=never -f "$POM" -Dmaven.repo.local="$CACHE_DIR/m2" \
  dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/jars" 2>&1 |
  sed 's/\x1b\[[0-9;]*m//g' >&2 # Maven 3.8 prints colour resets even with -B
(cd "$tmp/jars" && sha256sum -- *.jar | LC_ALL=C sort -k2) >"$tmp/SHA256SUMS"
echo "$pom_digest" >"$tmp/pom.sha256"
rm -rf "$OUT"
mv "$tmp" "$OUT"
say "Apache Kafka $VERSION: $(ls "$OUT/jars" | wc -l) jars, $(du -sh "$OUT/jars" | cut -f1), set $(sha256sum <"$OUT/SHA256SUMS" | cut -d" " -f1), in $((SECONDS - start))s"
echo "$OUT"
