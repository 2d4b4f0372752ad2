#!/usr/bin/env bash
# Run the Redis-backed packages against every server build in a directory.
#
#	internal/redistest/each-server.sh [DIR [go test flags...]]
#
# DIR (default /work/shared/servers) holds one folder per build, each with a
# redis-server or valkey-server binary (DIR/<name>/redis-server,
# DIR/<name>/valkey-server). For each, in name order, this prints the
# server's version and runs
#
#	FREQCAP_REDIS_SERVER=<binary> FREQCAP_REQUIRE_REDIS=1 go test -count=1 <packages>
#
# where the packages are internal/redistest and every package whose tests
# import it (found with go list, so a new one joins by itself). Extra
# arguments after DIR go to go test (e.g. -run or -v). No race detector: the
# point is the server's behaviour, and the main CI run has -race against
# the distribution's redis-server. It stops at the first failure. A missing
# DIR is not an error: the script says so in one line and exits 0.
#
# The whole caddymodule package runs against every server: 60-95 s of test
# time per server on a loaded 2-core machine (the script: about 1.5-2.2 min
# per server, 5 min for three). A -run selection of its Redis tests would
# save little: TestManyGatewaysOneTruth (about 34 s: standalone and
# Cluster) and TestFaults (about 14 s: restarts, AOF, Cluster failover) are
# most of it and are the store paths most worth running on each server,
# and the tests that run on both backends (eachBackend) cost well under a
# second each. To shorten a run, FREQCAP_INVARIANT_DURATION=5s (default
# 10s per store) halves the former's sending.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=${1:-/work/shared/servers}
if [ $# -gt 0 ]; then
	shift
fi
if [ ! -d "$dir" ]; then
	echo "each-server: no server builds at $dir: skipping"
	exit 0
fi
dir=$(cd "$dir" && pwd)

mapfile -t servers < <(find -L "$dir" -mindepth 2 -maxdepth 2 -type f \
	\( -name redis-server -o -name valkey-server \) -perm -u+x | LC_ALL=C sort)
if [ ${#servers[@]} -eq 0 ]; then
	echo "each-server: no redis-server or valkey-server under $dir: skipping"
	exit 0
fi

mod=$(go list -m)
mapfile -t pkgs < <(
	go list -e -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
		awk -v want="$mod/internal/redistest" '
			$1 == want { print $1; next }
			{ for (i = 2; i <= NF; i++) if ($i == want) { print $1; next } }'
)
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "each-server: found no package whose tests import $mod/internal/redistest" >&2
	exit 1
fi
echo "each-server: ${#servers[@]} server(s) under $dir; packages: ${pkgs[*]#"$mod/"}"

start=$SECONDS
for bin in "${servers[@]}"; do
	t0=$SECONDS
	echo "== $bin"
	"$bin" --version
	FREQCAP_REDIS_SERVER=$bin FREQCAP_REQUIRE_REDIS=1 go test -count=1 "$@" "${pkgs[@]}"
	echo "== $(basename "$(dirname "$bin")"): passed in $((SECONDS - t0)) s"
done
echo "each-server: all ${#servers[@]} server(s) passed in $((SECONDS - start)) s"
