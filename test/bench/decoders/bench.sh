#!/bin/sh
# Measures the candidate heartbeat decoders (README.md): the strictness
# tables once, then BenchmarkDecode in interleaved rounds, then the table.
# Usage: bench.sh [rounds [benchtime]]   (defaults: 5 rounds of 1s each)
#   GOEXPERIMENT=jsonv2 sh bench.sh   adds encoding/json/v2 (and changes
#   encoding/json itself: README.md)
set -eu
cd "$(dirname "$0")"
rounds=${1:-5}
benchtime=${2:-1s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/decoders.test" .
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(go version); GOEXPERIMENT=${GOEXPERIMENT:-}; nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/decoders.test" -test.run 'Strictness|Payloads'
for r in $(seq "$rounds"); do
  echo "-- round $r of $rounds"
  "$tmp/decoders.test" -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime" | tee -a "$tmp/bench.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
go run ./cmd/benchtable "$tmp/bench.txt"
