#!/usr/bin/env bash
# .ci/fuzz.sh runs every native Go fuzz target in the repository for a short
# time: each `func FuzzXxx(` found in a *_test.go file, one at a time (go test
# -fuzz takes exactly one package and one target). FUZZTIME (default 50000x) is
# passed to -fuzztime. It prints one line per target and fails if any does;
# a failing input is written under the package's testdata/fuzz as usual.
set -euo pipefail
cd "$(dirname "$0")/.."

# A count (Nx), not a duration: with a duration, Go 1.26's fuzz coordinator
# can fail a target with a bare "context deadline exceeded" when the time runs
# out mid-execution (golang/go#75804, fixed in Go 1.27). 50000 executions take
# a few seconds per target on this machine.
FUZZTIME="${FUZZTIME:-50000x}"

# "<package dir> <target>" for every fuzz target, sorted.
mapfile -t targets < <(
	grep -rE --include='*_test.go' --exclude-dir=.git --exclude-dir=vendor --exclude-dir=testdata \
		'^func Fuzz[A-Za-z0-9_]*\(' . |
		sed -E 's|^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*|\1 \2|; s|^\./[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*|. \1|' |
		sort -u
)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for entry in "${targets[@]}"; do
	dir=${entry% *}
	name=${entry#* }
	start=$SECONDS
	if go test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "./${dir}" >"$log" 2>&1; then
		printf 'ok    %-45s %s (%ds)\n' "./${dir}" "$name" $((SECONDS - start))
	else
		printf 'FAIL  %-45s %s (%ds)\n' "./${dir}" "$name" $((SECONDS - start))
		sed 's/^/    /' "$log"
		failed+=("./${dir} ${name}")
	fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
	echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed (${FUZZTIME} each)"
