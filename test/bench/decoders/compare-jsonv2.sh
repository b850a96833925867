#!/bin/sh
# Compares encoding/json as Go 1.26 builds it by default with encoding/json
# under GOEXPERIMENT=jsonv2 (the v1 API on the v2 engine) on every input of
# TestStrictness and TestStrictnessMutants: what Decode would accept, decode
# and say if the experiment (or a Go release that makes it the default) were
# turned on. Usage: compare-jsonv2.sh
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -run Strictness -dump "$tmp/v1" >/dev/null
GOEXPERIMENT=jsonv2 go test -run Strictness -dump "$tmp/v2" >/dev/null
for k in cases mutants; do
  # Each line: input (quoted), accepts|rejects, the heartbeat or error (quoted).
  awk -F'\t' -v k="$k" '
    NR == FNR { verdict[FNR] = $2; detail[FNR] = $3; next }
    $2 != verdict[FNR] { if ($2 == "accepts") a++; else r++; if (!ex) ex = $1 ": " verdict[FNR] " " detail[FNR] " / jsonv2 " $2 " " $3; next }
    $3 != detail[FNR] { if ($2 == "accepts") v++; else { t++; if (!tex) tex = detail[FNR] " / jsonv2 " $3 } }
    $2 == "rejects" { rej++ }
    END {
      printf "%s: %d inputs; with jsonv2: %d accepted that were rejected, %d rejected that were accepted, %d decoded differently; error text differs on %d of %d rejections\n", k, FNR, a, r, v, t, rej
      if (ex) print "  e.g. " ex
      if (tex) print "  error text, e.g. " tex
    }' "$tmp/v1.$k" "$tmp/v2.$k"
done
