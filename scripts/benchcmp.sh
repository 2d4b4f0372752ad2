#!/usr/bin/env bash
# Compare benchmarks of two checkouts side by side, for a change that must
# not cost anything (a move between packages, a refactor):
#
#	scripts/benchcmp.sh OLD NEW [ROUNDS]
#
# OLD and NEW are checkouts of this module (e.g. a `git worktree add`).
# For each benchmark below, the package that holds it is found in each
# checkout (a move may have changed it), a test binary is built in each,
# and the two binaries run in turn, ROUNDS times (default 6), on core 1
# with their own redis-server on core 0, so that both see the same
# machine at the same moments. benchstat then compares them. Results go
# to ${OUT:-/tmp/freqcap-benchcmp}.
set -euo pipefail
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
rounds=${3:-6}
out=${OUT:-/tmp/freqcap-benchcmp}
mkdir -p "$out"
benches=(${BENCHES:-BenchmarkHandler BenchmarkMemoryDecide BenchmarkRedisDecide})

# pkgOf prints the package of the checkout in $1 that declares benchmark $2.
pkgOf() {
	(cd "$1" && go test -list "^$2\$" ./... 2>/dev/null | awk -v b="$2" '$1 == b { found = 1 } /^ok / && found { print $2; exit }')
}

port=$((20000 + RANDOM % 20000))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((20000 + RANDOM % 20000)); done
taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
rpid=$!
trap 'kill "$rpid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done

for b in "${benches[@]}"; do
	for side in old new; do
		dir=${!side}
		pkg=$(pkgOf "$dir" "$b")
		[ -n "$pkg" ] || { echo "benchcmp: $b not found in $dir" >&2; exit 1; }
		echo "$side $b: $pkg"
		(cd "$dir" && go test -c -o "$out/$side-$b.test" "$pkg")
	done
done
rm -f "$out/old.txt" "$out/new.txt"
for i in $(seq "$rounds"); do
	for b in "${benches[@]}"; do
		order="old new"
		[ $((i % 2)) -eq 0 ] && order="new old"
		for side in $order; do
			REDIS_URL="redis://127.0.0.1:$port/0" taskset -c 1 "$out/$side-$b.test" -test.run '^$' -test.bench "^$b\$" -test.benchmem -test.benchtime 1s |
				grep '^Benchmark' >>"$out/$side.txt"
		done
	done
done
benchstat "$out/old.txt" "$out/new.txt" | tee "$out/benchstat.txt"
