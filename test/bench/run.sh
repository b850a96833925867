#!/bin/sh
# Runs every benchmark of docs/PERFORMANCE.md in one go on this machine.
# Usage: test/bench/run.sh [outfile]   (from the repository root)
set -u
out=${1:-/tmp/fleetbench.txt}
bin=$(mktemp -d)
go build -o "$bin/fleetbench" ./test/bench/cmd/fleetbench
go build -o "$bin/controller" ./cmd/controller
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
  echo "== rss 10k";  "$bin/fleetbench" rss -agents 10000  -controller "$bin/controller"
  echo "== rss 100k"; "$bin/fleetbench" rss -agents 100000 -controller "$bin/controller"
  echo "== httpfind"; go test -run '^$' -bench 'BenchmarkDecide|BenchmarkFind' -benchtime 2s ./pkg/httpfind
} 2>&1 | tee "$out"
rm -rf "$bin"
