#!/usr/bin/env bash
# Reproduces every figure of docs/performance.md, side by side in one
# run, on this machine (2 cores: Redis is pinned to core 0, the clients to
# core 1). Takes about 45 minutes with the defaults; RECIPIENTS=20000 RUNS=1
# makes a quick check of it. BASELINE=<git revision> also compares that
# revision's build of the module with this one through Caddy, side by side
# (loadgen -baseline).
#
#   bash scripts/bench.sh
#   BASELINE=cf3c77b bash scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPIENTS=${RECIPIENTS:-200000}
RUNS=${RUNS:-3}
out=${OUT:-/tmp/freqcap-bench}
mkdir -p "$out"

echo "== machine"
nproc
grep -m1 'model name' /proc/cpuinfo || true
redis-server --version
go version

echo "== memory store: one decision of the seed config (go test -bench, $RUNS runs)"
go test -run '^$' -bench 'MemoryDecide' -benchmem -count "$RUNS" ./limiter/memstore | tee "$out/memory.txt"

echo "== the handler alone: body, decision (memory store), placeholders, headers"
go test -run '^$' -bench 'BenchmarkHandler$' -benchmem -count "$RUNS" ./caddymodule | tee "$out/handler.txt"

echo "== Redis: seed-002 ZSET design vs this store (decided in the script, and in Go), one Redis core, 32 callers"
go build -o "$out/redisbench" ./examples/redisbench
taskset -c 1 "$out/redisbench" -recipients "$RECIPIENTS" -runs "$RUNS" -designs zset4,freqcap-script,freqcap | tee "$out/redis.txt"
echo "== Redis: the same data set as batch sends of 500 (4 senders) beside single sends, the read-and-write floor, and batches decided in the script"
taskset -c 1 "$out/redisbench" -recipients "$RECIPIENTS" -runs "$RUNS" -designs freqcap,freqcap-batch,floor-batch,freqcap-batch-script | tee "$out/redis-batch.txt"
echo "== what each way of reading, checking and writing a key costs Redis (the floor, WATCH, commit.lua)"
taskset -c 1 "$out/redisbench" -recipients "$RECIPIENTS" -primitives -runs "$RUNS" | tee "$out/primitives.txt"
VALKEY81=${VALKEY81:-/work/shared/servers/valkey-8.1.1/valkey-server}
if [ -x "$VALKEY81" ]; then
	echo "== Valkey 8.1.1: SET … IFEQ beside the floor and commit.lua; batch and single sends written natively beside today's commit.lua, same server"
	taskset -c 1 "$out/redisbench" -server "$VALKEY81" -recipients "$RECIPIENTS" -primitives -runs "$RUNS" | tee "$out/primitives-valkey81.txt"
	taskset -c 1 "$out/redisbench" -server "$VALKEY81" -recipients $((RECIPIENTS / 2)) -runs "$RUNS" -designs floor-batch,freqcap-batch-nocheck,freqcap-batch,freqcap-batch-commit | tee "$out/redis-batch-valkey81.txt"
	taskset -c 1 "$out/redisbench" -server "$VALKEY81" -recipients $((RECIPIENTS / 4)) -runs "$RUNS" -designs freqcap,freqcap-commit | tee "$out/redis-single-valkey81.txt"
fi
echo "== what one round trip costs Redis, by what it carries"
taskset -c 1 "$out/redisbench" -roundtrips | tee "$out/roundtrips.txt"

echo "== a lone decision (one caller, Redis on core 0): in the script, as on an idle store, and in Go; alternating"
go test -c -o "$out/redisstore.test" ./limiter/redisstore
# A port no server listens on (the benchmark flushes the database it is given).
port=$((20000 + RANDOM % 20000))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((20000 + RANDOM % 20000)); done
taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis-onecaller.log" 2>&1 &
rpid=$!
trap 'kill "$rpid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	kill -0 "$rpid" 2>/dev/null || { cat "$out/redis-onecaller.log"; exit 1; }
	sleep 0.1
done
redis-cli -p "$port" ping >/dev/null
for i in $(seq $((RUNS * 2))); do
	order="script go"
	[ $((i % 2)) -eq 0 ] && order="go script"
	for way in $order; do
		REDIS_URL="redis://127.0.0.1:$port/0" taskset -c 1 "$out/redisstore.test" -test.run '^$' -test.bench "RedisDecideOneCaller/$way\$" -test.benchtime 20000x -test.benchmem
	done
done | tee "$out/onecaller-raw.txt" | grep '^Benchmark' | tee "$out/onecaller.txt"
echo "== batch sends beside single sends on Redis: 500 entries of the seed config a batch (Redis on core 0)"
REDIS_URL="redis://127.0.0.1:$port/0" taskset -c 1 "$out/redisstore.test" -test.run '^$' -test.bench 'RedisDecide$|RedisDecideBatch|RedisReadWriteFloor' -test.benchtime 2s -test.count "$RUNS" -test.benchmem | tee "$out/batch-redis.txt"
kill "$rpid"
wait "$rpid" 2>/dev/null || true
trap - EXIT

echo "== batch sends beside single sends: 500 entries of the seed config a batch (memory store, the handler)"
taskset -c 1 go test -run '^$' -bench 'MemoryDecide$|MemoryDecideBatch' -benchtime 2s -count "$RUNS" ./limiter/memstore | tee "$out/batch-memory.txt"
taskset -c 1 go test -run '^$' -bench 'BenchmarkHandler$|BenchmarkHandlerBatch' -benchtime 2s -count "$RUNS" ./caddymodule | tee "$out/batch-handler.txt"

echo "== through Caddy: reverse_proxy alone (A) vs with frequency_cap (B), in alternating 1 s slices"
go build -o "$out/caddy" ./cmd/caddy
go build -o "$out/loadgen" ./examples/loadgen
taskset -c 1 "$out/loadgen" -caddy "$out/caddy" -runs $((RUNS * 4)) -latency-runs $((RUNS * 15)) | tee "$out/caddy.txt"
echo "== through Caddy: Expo batches of 500 messages, A proxying them, B reading them (skip) or capping every recipient (batch drop, memory store)"
taskset -c 1 "$out/loadgen" -caddy "$out/caddy" -batch 500 -recipients 1000000 -stores none,skip,memory -runs $((RUNS * 3)) -latency-runs $((RUNS * 4)) -concurrency 16 -latency-load 0.04 | tee "$out/caddy-batch.txt"
if [ -n "${BASELINE:-}" ]; then
	echo "== through Caddy: the build of $BASELINE (A) vs this one (B), both capped, each on a store of its own"
	rm -rf "$out/baseline-src"
	git worktree add --detach -f "$out/baseline-src" "$BASELINE" >/dev/null
	(cd "$out/baseline-src" && go build -o "$out/caddy-baseline" ./cmd/caddy)
	git worktree remove --force "$out/baseline-src"
	taskset -c 1 "$out/loadgen" -caddy "$out/caddy" -baseline "$out/caddy-baseline" -stores memory,redis@0,redis@1 -runs $((RUNS * 4)) -latency-runs $((RUNS * 15)) | tee "$out/baseline.txt"
fi
