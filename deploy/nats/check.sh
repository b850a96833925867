#!/usr/bin/env bash
# Check every deploy/nats/*.conf with "nats-server --config F -t", using the
# nats-server this module depends on (built from go.mod, never downloaded).
#
#   deploy/nats/check.sh                 # against a throw-away operator
#   deploy/nats/check.sh /etc/fleetwave/auth   # against your auth directory
#
# The configs include resolver.conf and fleet-account.conf, which
# 'fleetctl auth init' writes; they are copied next to the configs in a
# temporary directory, as an operator puts them next to the real ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2
auth=${1:-}
if [ -z "$auth" ]; then
	go run ./cmd/fleetctl auth init --dir "$tmp/auth" >/dev/null
	auth=$tmp/auth
fi
mkdir "$tmp/conf"
cp deploy/nats/*.conf "$tmp/conf/"
cp "$auth/resolver.conf" "$auth/fleet-account.conf" "$tmp/conf/"
# The resolver directory ("./jwt") is relative to the working directory and
# created when a config is read: keep it in the temporary directory.
cd "$tmp/conf"
n=0
for f in *.conf; do
	case $f in resolver.conf | fleet-account.conf) continue ;; esac
	"$tmp/nats-server" --config "$f" -t
	n=$((n + 1))
done
echo "deploy/nats: $n configs valid ($("$tmp/nats-server" --version))"
