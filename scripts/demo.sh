#!/usr/bin/env bash
# fleetwave demo: a controller on its embedded NATS JetStream server, eight
# agents in three groups on two versions, and what fleetctl shows of them.
# Then two agents stop and drop out of the counts once they expire.
#
#   scripts/demo.sh            # runs ~30s, then cleans up
#   DEMO_KEEP=1 scripts/demo.sh  # leaves everything running for the nats CLI
set -euo pipefail
cd "$(dirname "$0")/.."

port=${DEMO_PORT:-14222}
url="nats://127.0.0.1:$port"
work=$(mktemp -d "${TMPDIR:-/tmp}/fleetwave-demo.XXXXXX")
pids=()

cleanup() {
	if [ "${DEMO_KEEP:-}" = 1 ]; then
		echo "Left running (pids ${pids[*]}); state and logs in $work"
		return
	fi
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ -t 1 ]; then
	step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	step() { printf '\n== %s\n' "$*"; }
fi

step "Building controller, agentd and fleetctl into $work/bin"
go build -o "$work/bin/" ./cmd/...
export PATH="$work/bin:$PATH"
unset NATS_URL # set, it would make the controller connect out instead of embedding

step "Starting the controller with an embedded NATS server on $url"
# Short intervals so the demo moves in seconds; production defaults are
# 30s heartbeats, 10s stats and a 1h expiry.
controller run --listen "127.0.0.1:$port" --store-dir "$work/nats" \
	--heartbeat-interval 2s --stats-interval 1s --agent-expiry 8s \
	>"$work/controller.log" 2>&1 &
pids+=($!)
export NATS_URL="$url" # for agentd and fleetctl from here on
for _ in $(seq 100); do
	fleetctl status --timeout 1s >/dev/null 2>&1 && break
	sleep 0.1
done
fleetctl status --timeout 2s >/dev/null || { cat "$work/controller.log"; exit 1; }
sed -n '1,3p' "$work/controller.log"

step "Starting 8 agents: canary (2), staging (3), prod (3); versions 1.0.0 and 1.1.0, one rolled back"
i=0
agent_pids=()
for spec in canary:1.1.0 canary:1.0.0:rolledback staging:1.1.0 staging:1.0.0 staging:1.0.0 prod:1.0.0 prod:1.0.0 prod:1.0.0; do
	i=$((i + 1))
	IFS=: read -r group version state <<<"$spec"
	rollback=false rollback_from=""
	if [ "${state:-}" = rolledback ]; then
		rollback=true rollback_from="rollback_from: 1.1.0"
	fi
	root="$work/agents/$i"
	mkdir -p "$root"
	# Pretend the app is installed: agentd reports update.yaml's status.
	cat >"$root/update.yaml" <<YAML
version: v1
kind: update_config
spec:
  group: $group
  enabled: true
status:
  active_version: $version
  rollback: $rollback
  $rollback_from
YAML
	agentd run --root "$root" --hostname "host-$i" --heartbeat-interval 2s --heartbeat-jitter 200ms \
		>"$work/agent-$i.log" 2>&1 &
	pids+=($!)
	agent_pids+=($!)
done

step "Agents count once they have heartbeated for one interval (2s here)"
sleep 4
fleetctl status

step "fleetctl agents ls (read straight from the FLEET_HB stream)"
fleetctl agents ls

step "fleetctl status -o json (for scripts)"
fleetctl status -o json | head -20
echo "  ..."

step "Stopping two prod agents; they drop out after the 8s expiry, not before"
kill "${agent_pids[6]}" "${agent_pids[7]}"
sleep 3
echo "-- 3s later (still counted):"
fleetctl status
sleep 7
echo "-- 10s later (expired):"
fleetctl status

step "Look at the bus yourself with the nats CLI (see README), e.g."
echo "  nats --server $url kv get fleet_stats --raw \$(nats --server $url kv ls fleet_stats | head -1)"
echo "  nats --server $url stream view FLEET_HB"
