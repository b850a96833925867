#!/usr/bin/env bash
# fleetwave demo: a real rollout on one machine.
#
# A controller on its embedded NATS JetStream server, a release site serving
# app versions built on the fly, and six agentd processes in two groups
# (canary: 2, prod: 4). Each host runs two apps (DESIGN §9): "web", a
# tarball release agentd supervises, and "tool", installed by the host's own
# install command (the script installer; here a shell line that writes the
# version into a file, where a real host would run apt-get). The fleet is
# brought to web 1.0.0 and tool 1.0.0, then both are rolled out at once to
# different targets (web 1.1.0, tool 2.0.0): canaries first, a bounded number
# of hosts at a time, group by group, followed live with fleetctl watch.
#
#   scripts/demo.sh            # good release; ~1 minute, then cleans up
#   scripts/demo.sh --broken   # then ships web 1.2.0, which does not start:
#                              # the canary rolls back, web's group halts,
#                              # prod never moves; tool 2.1.0 rolls out
#                              # meanwhile (one app's halt is that app's)
#   scripts/demo.sh --secure   # the same on a secured bus: minted creds, the
#                              # server in operator mode, one creds file per
#                              # agent, signed releases (agentd --public-key);
#                              # an agent's creds trying to set the target,
#                              # refused; and the release site serving 1.0.0's
#                              # signed files as 1.3.0: the canary refuses,
#                              # the group halts (combine with --broken;
#                              # needs openssl)
#   DEMO_KEEP=1 scripts/demo.sh  # leave everything running for the nats CLI
#   DEMO_PORT=24222 scripts/demo.sh  # NATS on 24222 (default 14222), the
#                              # release site on DEMO_PORT+1 (or
#                              # DEMO_RELEASES_PORT), the dashboard on
#                              # DEMO_PORT+2 (or DEMO_HTTP_PORT)
#
# Open the dashboard the demo prints (http://127.0.0.1:14224/) to watch the
# rollout in a browser while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

broken=false
secure=false
for arg in "$@"; do
	case "$arg" in
	--broken) broken=true ;;
	--secure) secure=true ;;
	-h | --help) sed -n '2,29p' "$0"; exit 0 ;;
	*) echo "unknown argument $arg (try --help)" >&2; exit 2 ;;
	esac
done

is_port() { [[ $1 =~ ^[0-9]{1,5}$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
port=${DEMO_PORT:-14222}
is_port "$port" || { echo "DEMO_PORT=$port: want a TCP port (1-65535)" >&2; exit 2; }
releases_port=${DEMO_RELEASES_PORT:-$((port + 1))}
is_port "$releases_port" || { echo "DEMO_RELEASES_PORT=$releases_port: want a TCP port (1-65535)" >&2; exit 2; }
http_port=${DEMO_HTTP_PORT:-$((port + 2))}
is_port "$http_port" || { echo "DEMO_HTTP_PORT=$http_port: want a TCP port (1-65535)" >&2; exit 2; }
url="nats://127.0.0.1:$port"
work=$(mktemp -d "${TMPDIR:-/tmp}/fleetwave-demo.XXXXXX")
pids=()

cleanup() {
	local rc=$?
	if [ "$rc" != 0 ]; then
		for log in "$work"/controller.log "$work"/agent-*.log; do
			[ -f "$log" ] && { echo "--- $log (tail)"; tail -15 "$log"; }
		done
	fi
	if [ "${DEMO_KEEP:-}" = 1 ]; then
		echo "Left running (pids ${pids[*]}); state and logs in $work; NATS at $url"
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

step "Building controller, agentd, fleetctl and the demo release site into $work/bin"
go build -o "$work/bin/" ./cmd/... ./test/cmd/releases
export PATH="$work/bin:$PATH"

sign=() verify=()
if $secure; then
	step "Release signing key: every release's statement (app, version, file, size, sha256) is signed"
	command -v openssl >/dev/null || { echo "--secure signs releases with openssl (scripts/release.sh --new-key): install it" >&2; exit 1; }
	scripts/release.sh --new-key "$work/release.pem"
	sign=(--key "$work/release.pem" --release 1.3.0=replay:1.0.0)
	verify=(--public-key "$work/release.pem.pub")
	step "Release site: 1.0.0 and 1.1.0 (good), 1.2.0 (does not start), signed; 1.3.0: 1.0.0's signed files served again"
else
	step "Release site: 1.0.0 and 1.1.0 (good), 1.2.0 (does not start)"
fi
releases --addr "127.0.0.1:$releases_port" --release 1.0.0=good --release 1.1.0=good --release 1.2.0=crash "${sign[@]}" >"$work/releases.out" 2>"$work/releases.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/releases.out" ] && break; sleep 0.1; done
[ -s "$work/releases.out" ] || { cat "$work/releases.log"; echo "the release site did not start (port $releases_port taken? set DEMO_RELEASES_PORT)"; exit 1; }
template=$(head -1 "$work/releases.out")
echo "agents download from $template"

auth=()
if $secure; then
	step "Minting the trust root: operator, accounts FLEET, AGENTS, CONTROL, admin and controller creds"
	fleetctl auth init --dir "$work/auth"
	auth=(--auth-dir "$work/auth")
	export NATS_CREDS="$work/auth/creds/admin.creds" # fleetctl is the admin; each agentd gets its own below
fi

step "Controller with an embedded NATS server on $url"
# Short intervals so the demo moves in seconds; production defaults are 30s
# heartbeats, 10s stats and reconcile, 30s lease.
controller run --listen "127.0.0.1:$port" --store-dir "$work/nats" "${auth[@]}" \
	--heartbeat-interval 1s --stats-interval 1s --reconcile-interval 1s --lease-ttl 5s \
	--agent-expiry 1m --http-addr "127.0.0.1:$http_port" >"$work/controller.log" 2>&1 &
pids+=($!)
export NATS_URL="$url" # for agentd and fleetctl from here on
for _ in $(seq 100); do
	fleetctl status --timeout 1s >/dev/null 2>&1 && break
	sleep 0.1
done
fleetctl status --timeout 2s >/dev/null || { cat "$work/controller.log"; exit 1; }
echo "dashboard: http://127.0.0.1:$http_port/ (live; /metrics for Prometheus)"

step "Rollout config: canary (1 canary, 50% in flight), then prod (1 canary, 25% in flight)"
cat >"$work/groups.yaml" <<YAML
groups:
  - name: canary
    canary_count: 1
    max_in_flight: 50%
    jitter_seconds: 1
    health_timeout: 10s
    min_healthy_time: 2s
  - name: prod
    canary_count: 1
    max_in_flight: 25%
    jitter_seconds: 1
    health_timeout: 10s
    min_healthy_time: 2s
YAML
fleetctl config apply -f "$work/groups.yaml"
step "Two apps: web (the fleet's first, by tarball) and tool (by the hosts' own install command)"
fleetctl apps add web --default            # names the app the fleet had: nothing moves
fleetctl apps add tool --installer script
export FLEETCTL_APP=web # fleetctl's plan and status commands act on web unless --app says otherwise
fleetctl plan set --start 1.0.0 --target 1.0.0 --critical >/dev/null # critical: start now, ignore windows

step "Six agents; each installs web 1.0.0 (what its group runs) and supervises it, and installs tool 1.0.0 with its install command"
i=0
for group in canary canary prod prod prod prod; do
	i=$((i + 1))
	root="$work/agents/$i"
	agentd enable --root "$root" --group "$group" --nats "$url" --url-template "$template" \
		--process app --bin-dir "$root/bin" "${verify[@]}" --log-level error >/dev/null
	# The script installer runs this with FLEETWAVE_VERSION (and _ACTION,
	# _PREVIOUS_VERSION, _APP) set; the version command's output is what
	# the host reports. A real host: apt-get install "tool=$FLEETWAVE_VERSION".
	agentd enable --root "$root" --app tool --group "$group" --nats "$url" --installer script \
		--install-cmd "printf '%s' \"\$FLEETWAVE_VERSION\" >'$root/tool.version'" \
		--version-cmd "cat '$root/tool.version' 2>/dev/null || true" --log-level error >/dev/null
	creds=()
	if $secure; then
		# Creds for this host alone: its heartbeat subjects, its group's
		# plan, of the two apps it runs.
		fleetctl auth agent --dir "$work/auth" --group "$group" --id "$(cat "$root/agent_id")" --apps web,tool >/dev/null
		creds=(--creds "$work/auth/agents/$(cat "$root/agent_id").creds")
	fi
	agentd run --root "$root" --process app --bin-dir "$root/bin" --hostname "host-$i" "${creds[@]}" \
		--heartbeat-interval 1s --heartbeat-jitter 100ms >"$work/agent-$i.log" 2>&1 &
	pids+=($!)
done
# tool's plan after its hosts are set up: 'agentd enable' installs what the
# plan gives at once, and before the controller's first pass over a new plan
# the group's health times are the defaults (5 minutes' min_healthy_time).
fleetctl plan set --app tool --start 1.0.0 --target 1.0.0 --critical >/dev/null
fleetctl apps ls
timeout 180 fleetctl status --wait >/dev/null || { echo "web did not reach 1.0.0 in 3 minutes"; exit 1; }
timeout 180 fleetctl status --app tool --wait >/dev/null || { echo "tool did not reach 1.0.0 in 3 minutes"; exit 1; }
fleetctl status

# roll_to V [TOOL_V] sets web's target to V (and tool's to TOOL_V, at the
# same time) and waits (at most 3 minutes) for the rollouts to end, with
# fleetctl watch printing web's events meanwhile; code is web's fleetctl
# status --wait exit code (0 done, 3 halted, 4 done with failures), and
# tool_code tool's.
roll_to() {
	fleetctl watch &
	local watch_pid=$!
	pids+=("$watch_pid")
	fleetctl plan set --target "$1" --critical >/dev/null # critical said, not carried over: start now
	[ -n "${2:-}" ] && fleetctl plan set --app tool --target "$2" --critical >/dev/null
	code=0 tool_code=0
	timeout 180 fleetctl status --wait >/dev/null || code=$?
	[ -n "${2:-}" ] && { timeout 180 fleetctl status --app tool --wait >/dev/null || tool_code=$?; }
	sleep 1 # let watch print the last events
	kill "$watch_pid" 2>/dev/null || true
}

step "Rolling out web 1.1.0 and tool 2.0.0 at once (web's events from fleetctl watch as they happen)"
roll_to 1.1.0 2.0.0
[ "$code" = 0 ] || { echo "web's rollout did not finish in 3 minutes (exit $code)"; exit 1; }
[ "$tool_code" = 0 ] || { echo "tool's rollout did not finish in 3 minutes (exit $tool_code)"; exit 1; }
step "Done: every host on web 1.1.0 and tool 2.0.0"
fleetctl apps ls
fleetctl status
fleetctl agents ls --app tool

if $broken; then
	step "Shipping web 1.2.0, which does not start, and tool 2.1.0: watch web's canary roll back and its group halt while tool moves on"
	roll_to 1.2.0 2.1.0
	step "web halted (fleetctl status --wait exited $code): the canary is back on 1.1.0, prod never moved; tool is on 2.1.0 everywhere (exit $tool_code)"
	fleetctl apps ls
	fleetctl status
	fleetctl agents ls
	[ "$code" = 3 ] || { echo "expected exit code 3 (halted)"; exit 1; }
	[ "$tool_code" = 0 ] || { echo "tool's rollout did not finish (exit $tool_code): one app's halt stopped another"; exit 1; }
fi

if $secure; then
	step "An agent's creds try to set the target: the server refuses (docs/security.md)"
	first=$(cat "$work/agents/1/agent_id")
	if fleetctl --creds "$work/auth/agents/$first.creds" --timeout 2s plan set --target 6.6.6 2>&1 | tail -2; then
		echo "an agent's creds set the target"
		exit 1
	fi
	if grep -qi "permissions violation" "$work"/controller.log "$work"/agent-*.log; then
		echo "a process was refused something it does:"
		grep -i "permissions violation" "$work"/controller.log "$work"/agent-*.log | head
		exit 1
	fi
	echo "refused; and neither the controller nor any agent was refused anything it does"

	step "The release site serves 1.0.0's genuine signed files as 1.3.0 (a site in an attacker's hands): the canary refuses them, the group halts"
	roll_to 1.3.0
	fleetctl status
	fleetctl agents ls
	[ "$code" = 3 ] || { echo "expected exit code 3 (halted on a bad artifact)"; exit 1; }
	grep -h "signed for version 1.0.0, want 1.3.0" "$work"/agent-*.log | head -1 | cut -c1-300
	grep -q "signed for version 1.0.0, want 1.3.0" "$work"/agent-*.log || { echo "no agent said why it refused 1.3.0"; exit 1; }
fi

step "Look at the bus yourself with the nats CLI (see README), e.g."
creds_flag=""
$secure && creds_flag=" --creds $NATS_CREDS"
echo "  nats --server $url$creds_flag kv get fleet_plan group.canary --raw        # web's (the fleet's first app: no prefix)"
echo "  nats --server $url$creds_flag kv get fleet_plan tool.group.canary --raw   # tool's"
echo "  nats --server $url$creds_flag sub 'fleet.events.>'"
