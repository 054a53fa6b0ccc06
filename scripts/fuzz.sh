#!/usr/bin/env bash
# Runs every native fuzz target of the module, one after another, each for
# FUZZTIME (default 15s; go test's -fuzztime forms: a duration, or a count
# of inputs such as 20000x, which CI uses), and stops at the first crasher. Go writes a crasher
# to <package>/testdata/fuzz/<Target>/ and prints how to rerun it; commit
# that file: `go test` then replays it as a regression case forever.
#
# Targets are discovered from the source, so a new Fuzz function is fuzzed
# without touching this script. FUZZPKGS narrows the packages (default: every
# package holding a fuzz target).
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go toolchain go.mod asks for, as the Makefile sets it, for a run
# without make.
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-15s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-2s}

if [[ -n "${FUZZPKGS:-}" ]]; then
	read -r -a pkgs <<<"$FUZZPKGS"
else
	mapfile -t pkgs < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
		xargs -r -n1 dirname | sort -u)
fi
if [[ ${#pkgs[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

n=0
for pkg in "${pkgs[@]}"; do
	[[ $pkg == ./* ]] || pkg=./$pkg
	mapfile -t targets < <($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	for target in "${targets[@]}"; do
		echo "fuzz: $pkg $target for $FUZZTIME"
		# -run '^$' skips the unit tests; the seed corpus still runs first.
		# Minimising each new interesting input may take 60s by default and
		# is not counted as fuzzing: with a 15s budget most of it went there.
		if ! $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg"; then
			echo "fuzz: $target in $pkg failed; the crasher is under $pkg/testdata/fuzz/$target/ (commit it)" >&2
			exit 1
		fi
		n=$((n + 1))
	done
done
echo "fuzz: $n targets ran clean for $FUZZTIME each"
