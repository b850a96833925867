#!/bin/sh
# Runs every benchmark of docs/PERFORMANCE.md in one go on this machine.
# Usage: test/bench/run.sh [outfile]   (from the repository root)
set -u
out=${1:-/tmp/fleetbench.txt}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/fleetbench" ./test/bench/cmd/fleetbench || exit 1
go build -o "$bin/controller" ./cmd/controller || exit 1
go build -o "$bin/agentd" ./cmd/agentd || exit 1
{
  date -u; go version; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -m | sed -n 2p
  echo "== ingest 10k";  "$bin/fleetbench" ingest -agents 10000
  echo "== ingest 100k"; "$bin/fleetbench" ingest -agents 100000
  # 2a: plan notification on the agents' own connections, each size
  # measured 5 times; the table at the end says where p99 reaches 250 ms.
  echo "== plan conns sweep 1k-10k, 5 repeats"; "$bin/fleetbench" plan -mode conns -sweep 1000,2500,5000,7500,10000 -repeat 5
  echo "== plan shared 1k";  "$bin/fleetbench" plan -mode shared -agents 1000   -conns 10
  echo "== plan shared 10k"; "$bin/fleetbench" plan -mode shared -agents 10000  -conns 100
  echo "== plan shared 100k"; "$bin/fleetbench" plan -mode shared -agents 100000 -conns 100
  echo "== plan watch 1k";   "$bin/fleetbench" plan -mode watch  -agents 1000   -conns 10
  # 2b: nats-server's sublist cache (on: before; off: what fleetwave runs).
  echo "== plan shared 100k sublist-cache"; "$bin/fleetbench" plan -mode shared -agents 100000 -conns 100 -sublist-cache
  echo "== plan fanout 100k"; "$bin/fleetbench" plan -mode fanout -agents 100000 -conns 100
  for r in 1 2 3 4 5; do
    echo "== ingest 100k plan-subs 100k sublist-cache, pair $r"; "$bin/fleetbench" ingest -agents 100000 -plan-subs 100000 -sublist-cache
    echo "== ingest 100k plan-subs 100k, pair $r";               "$bin/fleetbench" ingest -agents 100000 -plan-subs 100000
  done
  # 2c: agents on their own connections behind leaf nodes.
  echo "== tier 10k hub only, 5 repeats"; "$bin/fleetbench" tier -agents 10000 -leaves 0 -repeat 5
  echo "== tier 10k 1 leaf, 5 repeats";   "$bin/fleetbench" tier -agents 10000 -leaves 1 -repeat 5
  echo "== tier 10k 2 leaves, 5 repeats"; "$bin/fleetbench" tier -agents 10000 -leaves 2 -repeat 5
  echo "== tier 100k 7 leaves"; "$bin/fleetbench" tier -agents 100000 -leaves 7
  echo "== tier 100k 7 leaves sublist-cache"; "$bin/fleetbench" tier -agents 100000 -leaves 7 -sublist-cache
  echo "== rss 10k";  "$bin/fleetbench" rss -agents 10000  -controller "$bin/controller"
  echo "== rss 100k"; "$bin/fleetbench" rss -agents 100000 -controller "$bin/controller"
  # 1: the candidate heartbeat decoders side by side, 5 interleaved rounds.
  echo "== decoders"; sh test/bench/decoders/bench.sh 5 1s
  echo "== decoders GOEXPERIMENT=jsonv2"; GOEXPERIMENT=jsonv2 sh test/bench/decoders/bench.sh 5 1s
  echo "== decoders encoding/json vs GOEXPERIMENT=jsonv2"; sh test/bench/decoders/compare-jsonv2.sh
  echo "== httpfind"; go test -run '^$' -bench 'BenchmarkDecide|BenchmarkFind' -benchtime 2s ./pkg/httpfind
  # 5: a 100 MB release install against sha256sum && tar xzf.
  echo "== install 100MB"; go test -run '^$' -bench Install100MB -benchtime 1x -count 5 ./pkg/install/
  # 5: a failed health check rolled back (20 runs), and agentd idle.
  echo "== rollback 20";      "$bin/fleetbench" rollback -runs 20 -agentd "$bin/agentd"
  echo "== rollback 20 hang"; "$bin/fleetbench" rollback -runs 20 -bad-health hang -agentd "$bin/agentd"
  echo "== idle 10m";         "$bin/fleetbench" idle -duration 10m -agentd "$bin/agentd"
} 2>&1 | tee "$out"
