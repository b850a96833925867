#!/bin/sh
# Runs every benchmark of docs/PERFORMANCE.md in one go on this machine.
#
# Usage (from the repository root):
#   test/bench/run.sh [outfile]          every figure (about 75 minutes on 2 cores)
#   test/bench/run.sh -quick [outfile]   each command at a small size (< 3 min):
#                                        CI runs it so that no benchmark rots
#
# Each section starts with "== name"; the machine, date and load average
# come first. Every command must succeed: the script exits 1 if one failed.
set -u
quick=0
if [ "${1:-}" = "-quick" ]; then
	quick=1
	shift
fi
out=${1:-/tmp/fleetbench.txt}
tmp=$(mktemp -d)
bin=$tmp/bin
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
mkdir -p "$bin"
go build -o "$bin/fleetbench" ./test/bench/cmd/fleetbench || exit 1
go build -o "$bin/controller" ./cmd/controller || exit 1
go build -o "$bin/agentd" ./cmd/agentd || exit 1
go build -o "$bin/sim" ./test/cmd/sim || exit 1
fb=$bin/fleetbench

# run NAME COMMAND...: one section; a failure is remembered.
run() {
	name=$1
	shift
	echo "== $name ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
	if ! "$@"; then
		echo "FAILED: $name"
		echo "$name" >>"$tmp/failed"
	fi
}

# The controller before issue 17 (encoding/json decoding, a lock and a
# clock read per heartbeat, an allocation per agent): built from 1f33306
# with the -cpuprofile flag of aed3b99, for the interleaved A/B of §1.
before() {
	git worktree add -q --detach "$tmp/before" 1f33306 &&
		git -C "$tmp/before" cherry-pick -n aed3b99 >/dev/null &&
		(cd "$tmp/before" && go build -o "$bin/fleetbench-before" ./test/bench/cmd/fleetbench &&
			go build -o "$bin/controller-before" ./cmd/controller)
}

quick() {
	run "ingest 20k" "$fb" ingest -agents 20000
	run "controller 20k (rss, live window, passes)" "$fb" rss -agents 20000 -controller "$bin/controller" -inprocess=false -for 5s
	run "decode and passes" go test -run '^$' -bench 'BenchmarkDecode$|AggregatePass1M|Next100k' -benchtime 1x ./pkg/heartbeat ./pkg/rollout
	run "decoders" sh test/bench/decoders/bench.sh 1 100ms
	run "plan conns sweep 500-1k, 2 repeats" "$fb" plan -mode conns -sweep 500,1000 -repeat 2 -rounds 2
	run "plan shared 1k" "$fb" plan -mode shared -agents 1000 -conns 10
	run "tier 1k 1 leaf" "$fb" tier -agents 1000 -leaves 1
	run "httpfind" go test -run '^$' -bench 'BenchmarkDecide|BenchmarkFind' -benchtime 100ms ./pkg/httpfind
	run "install TUF vs plain (small)" go test -run 'TestInstallTUFBenchSmall' ./test/bench/tufinstall/
	run "rollback 3" "$fb" rollback -runs 3 -health-timeout 1s -agentd "$bin/agentd"
	run "idle 10s" "$fb" idle -duration 10s -settle 2s -agentd "$bin/agentd"
	apps 1000 "--install-min 200ms --install-max 600ms"
}

# apps N ARGS: issue 26's scale figures: a simulated rollout of N hosts with
# one app, then of the same N hosts running 3 apps rolled out at once, the
# second printed as ratios to the first (sim --compare).
apps() {
	run "sim $1 hosts: 1 app, then 3 apps (ratios)" sh -c "\"$bin/sim\" --agents $1 $2 -o json >\"$tmp/sim1.json\" &&
		\"$bin/sim\" --agents $1 $2 --apps 3 --compare \"$tmp/sim1.json\""
}

full() {
	# 5c: agentd idle for 10 minutes, in the background from the start (it
	# costs the machine nothing; its own CPU and RSS are what it measures).
	"$fb" idle -duration 10m -agentd "$bin/agentd" >"$tmp/idle.txt" 2>&1 &
	idle=$!
	# 1: ingest against the raw publish rate, before (1f33306) and after,
	# interleaved, 5 pairs each at 100k and 1M; then one profiled run each.
	for r in 1 2 3 4 5; do
		run "ingest 100k before, pair $r" "$bin/fleetbench-before" ingest -agents 100000
		run "ingest 100k after, pair $r" "$fb" ingest -agents 100000
	done
	for r in 1 2 3 4 5; do
		run "ingest 1M before, pair $r" "$bin/fleetbench-before" ingest -agents 1000000
		run "ingest 1M after, pair $r" "$fb" ingest -agents 1000000
	done
	# The profiles stay beside the output file ($out.before.prof, .after.prof).
	run "ingest 200k before, profiled" "$bin/fleetbench-before" ingest -agents 200000 -cpuprofile "$out.before.prof"
	run "pprof before" go tool pprof -top -nodecount 25 "$bin/fleetbench-before" "$out.before.prof"
	run "ingest 200k after, profiled" "$fb" ingest -agents 200000 -cpuprofile "$out.after.prof"
	run "pprof after" go tool pprof -top -nodecount 25 "$fb" "$out.after.prof"
	run "ingest 10k" "$fb" ingest -agents 10000
	# 1: the decoders, ours against encoding/json in the same run, and the
	# candidate libraries side by side (5 interleaved rounds).
	run "decode" go test -run '^$' -bench 'BenchmarkDecode$' -benchtime 1s -count 5 ./pkg/heartbeat
	run "decoders" sh test/bench/decoders/bench.sh 5 1s
	run "decoders GOEXPERIMENT=jsonv2" env GOEXPERIMENT=jsonv2 sh test/bench/decoders/bench.sh 5 1s
	run "decoders encoding/json vs GOEXPERIMENT=jsonv2" sh test/bench/decoders/compare-jsonv2.sh
	# 2: a million agents on the controller process: inventory recovered,
	# a paced live window of 33,333 heartbeats/s, pass times, RSS; with Go's
	# default collector, then with GOMEMLIMIT; before and after.
	run "passes at 1M" go test -run '^$' -bench 'AggregatePass1M|Next100k' -benchtime 5x ./pkg/heartbeat ./pkg/rollout
	run "controller 1M before" "$bin/fleetbench" rss -agents 1000000 -controller "$bin/controller-before" -inprocess=false
	run "controller 1M" "$fb" rss -agents 1000000 -controller "$bin/controller" -inprocess=false
	run "controller 1M GOMEMLIMIT=550MiB" "$fb" rss -agents 1000000 -controller "$bin/controller" -inprocess=false -gomemlimit 550MiB
	run "controller 100k" "$fb" rss -agents 100000 -controller "$bin/controller"
	run "controller 10k" "$fb" rss -agents 10000 -controller "$bin/controller"
	# 2a: plan notification on the agents' own connections, each size
	# measured 5 times; the table at the end says where p99 reaches 250 ms.
	run "plan conns sweep 1k-10k, 5 repeats" "$fb" plan -mode conns -sweep 1000,2500,5000,7500,10000 -repeat 5
	run "plan shared 1k" "$fb" plan -mode shared -agents 1000 -conns 10
	run "plan shared 10k" "$fb" plan -mode shared -agents 10000 -conns 100
	run "plan shared 100k" "$fb" plan -mode shared -agents 100000 -conns 100
	run "plan watch 1k" "$fb" plan -mode watch -agents 1000 -conns 10
	# 2b: nats-server's sublist cache (on: before; off: what fleetwave runs).
	run "plan shared 100k sublist-cache" "$fb" plan -mode shared -agents 100000 -conns 100 -sublist-cache
	run "plan fanout 100k" "$fb" plan -mode fanout -agents 100000 -conns 100
	# 2c: agents on their own connections behind leaf nodes.
	run "tier 10k hub only, 5 repeats" "$fb" tier -agents 10000 -leaves 0 -repeat 5
	run "tier 10k 1 leaf, 5 repeats" "$fb" tier -agents 10000 -leaves 1 -repeat 5
	run "tier 10k 2 leaves, 5 repeats" "$fb" tier -agents 10000 -leaves 2 -repeat 5
	run "tier 100k 7 leaves" "$fb" tier -agents 100000 -leaves 7
	run "httpfind" go test -run '^$' -bench 'BenchmarkDecide|BenchmarkFind' -benchtime 2s ./pkg/httpfind
	# 5: a 100 MB release install against sha256sum && tar xzf; a failed
	# health check rolled back (20 runs each way); agentd idle.
	run "install 100MB" go test -run '^$' -bench Install100MB -benchtime 1x -count 5 ./pkg/install/
	# issue 27: the same install verified through a TUF release repository,
	# paired with the plain one in every iteration (x-plain: TUF over plain).
	run "install 100MB TUF vs plain" go test -run '^$' -bench Install100MBTUF -benchtime 10x ./test/bench/tufinstall/
	run "rollback 20" "$fb" rollback -runs 20 -agentd "$bin/agentd"
	run "rollback 20 hang" "$fb" rollback -runs 20 -bad-health hang -agentd "$bin/agentd"
	# 2: a simulated rollout of 1,000,000 agents on 200 shared connections
	# (about 20 minutes; the whole process's RSS is the simulator's too).
	run "sim 1M" go run ./test/cmd/sim --agents 1000000 --heartbeat 30s --install-min 10s --install-max 30s \
		--reconcile 5s --stats 10s --timeout 30m --progress 1m
	# issue 26: 3 apps × 100,000 hosts against 1 app × 100,000 (about 25 minutes).
	apps 100000 "--heartbeat 30s --install-min 5s --install-max 15s --reconcile 5s --stats 10s --timeout 30m --progress 1m --max-rss 8000"
	wait "$idle" || echo "idle 10m" >>"$tmp/failed"
	echo "== idle 10m (ran in the background from the start)"
	cat "$tmp/idle.txt"
}

{
	date -u
	go version
	echo "nproc $(nproc)"
	grep -m1 'model name' /proc/cpuinfo
	free -m | sed -n 2p
	if [ "$quick" = 1 ]; then
		quick
	elif before; then
		full
	else
		echo "FAILED: building the before binaries (1f33306 + aed3b99)"
		echo before >>"$tmp/failed"
	fi
	date -u
} 2>&1 | tee "$out"
if [ -s "$tmp/failed" ]; then
	echo "run.sh: failed: $(tr '\n' ' ' <"$tmp/failed")" >&2
	exit 1
fi
