#!/bin/sh
# Runs every benchmark of docs/PERFORMANCE.md in one go on this machine.
# Usage: test/bench/run.sh [outfile]   (from the repository root)
set -u
out=${1:-/tmp/fleetbench.txt}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/fleetbench" ./test/bench/cmd/fleetbench || exit 1
go build -o "$bin/controller" ./cmd/controller || exit 1
go build -o "$bin/sim" ./test/cmd/sim || exit 1
{
  date -u; go version; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo; free -m | sed -n 2p
  echo "== ingest 10k";  "$bin/fleetbench" ingest -agents 10000
  echo "== ingest 100k"; "$bin/fleetbench" ingest -agents 100000
  echo "== plan conns 1k";   "$bin/fleetbench" plan -mode conns  -agents 1000
  echo "== plan conns 10k";  "$bin/fleetbench" plan -mode conns  -agents 10000
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
  echo "== tier 10k hub only";  "$bin/fleetbench" tier -agents 10000 -leaves 0
  echo "== tier 10k 1 leaf";    "$bin/fleetbench" tier -agents 10000 -leaves 1
  echo "== tier 100k 7 leaves"; "$bin/fleetbench" tier -agents 100000 -leaves 7
  echo "== tier 100k 7 leaves sublist-cache"; "$bin/fleetbench" tier -agents 100000 -leaves 7 -sublist-cache
  echo "== rss 10k";  "$bin/fleetbench" rss -agents 10000  -controller "$bin/controller"
  echo "== rss 100k"; "$bin/fleetbench" rss -agents 100000 -controller "$bin/controller"
  echo "== httpfind"; go test -run '^$' -bench 'BenchmarkDecide|BenchmarkFind' -benchtime 2s ./pkg/httpfind
  # 5: a 100 MB release install against sha256sum && tar xzf.
  echo "== install 100MB"; go test -run '^$' -bench Install100MB -benchtime 1x -count 5 ./pkg/install/
  # A simulated rollout of 1,000,000 agents (about 20 minutes on 2 cores).
  echo "== sim 1M rollout"; uptime; "$bin/sim" --agents 1000000 --heartbeat 30s --install-min 10s --install-max 30s --reconcile 5s --stats 10s --timeout 30m --progress 60s --max-rss 16000
} 2>&1 | tee "$out"
