#!/usr/bin/env bash
# Install fleetwave's agentd on this host from a release tarball, as a
# hardened systemd service, and run 'agentd enable'.
#
#   install.sh --tarball fleetwave-<version>-linux-amd64.tar.gz \
#     --nats nats://nats-a:4222,nats://nats-b:4222 --group prod \
#     --creds ./agent.creds [--agent-id ID] [--tls-ca ca.pem] \
#     [--url-template 'https://dl.example/app/{{.Version}}/app.tar.gz'] \
#     -- --systemd-unit myapp.service --health-url http://127.0.0.1:8080/healthz
#
# The tarball is what scripts/dist.sh builds (bin/agentd, and the unit
# under deploy/systemd/; this script is there too).
#
# The creds come from 'fleetctl auth agent --group G [--id ID]' on the
# machine that holds the auth directory. They are minted for one agent id:
# either mint them for the host's id ('agentd status --root ROOT' shows it
# once agentd ran) or mint first and pass the printed id with --agent-id,
# which this script writes to <root>/agent_id before agentd ever starts.
#
# Arguments after "--" are agentd flags for how the app runs and is judged
# (--systemd-unit or --process, --health-url, --health-command, --db, --bin-dir,
# --find-url, --public-key, or --release-repo URL --release-root FILE instead
# of --url-template for a TUF release repository): they go to 'agentd
# enable', which saves them in update.yaml for later commands, and, through
# AGENTD_ARGS in /etc/fleetwave/agentd.env, to every 'agentd run'. Keep the
# root file (e.g. /etc/fleetwave/root.json) on the host: every start reads
# it, and a root the host trusts already, or an older one after a rotation
# it followed, changes nothing.
#
# --destdir DIR installs under DIR and starts nothing (packaging, tests).
# It never writes an agent id (unless --agent-id is given): each host draws
# its own when agentd first starts there, so hosts installed from one staged
# tree stay distinct. Nor does it contact the bus or install the app: the
# staged update.yaml is enabled, and the first 'agentd run' on the host
# installs what its group runs.
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
	exit 2
}
die() {
	echo "install.sh: $*" >&2
	exit 1
}

tarball="" nats="" group="" creds="" agent_id="" url_template="" tls_ca=""
prefix=/usr/local root=/var/lib/fleetwave destdir="" start=1
agentd_args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--tarball) tarball=$2; shift 2 ;;
	--nats) nats=$2; shift 2 ;;
	--group) group=$2; shift 2 ;;
	--creds) creds=$2; shift 2 ;;
	--agent-id) agent_id=$2; shift 2 ;;
	--url-template) url_template=$2; shift 2 ;;
	--tls-ca) tls_ca=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	--root) root=$2; shift 2 ;;
	--destdir) destdir=$2; start=0; shift 2 ;;
	--no-start) start=0; shift ;;
	--help | -h) usage ;;
	--) shift; agentd_args=("$@"); break ;;
	*) echo "install.sh: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$tarball" ] || die "--tarball is required"
[ -n "$nats" ] || die "--nats is required"
[ -n "$group" ] || die "--group is required"
[ -n "$creds" ] || die "--creds is required (fleetctl auth agent)"
[ -f "$tarball" ] || die "$tarball: no such file"
[ -f "$creds" ] || die "$creds: no such file"
if [ -n "$agent_id" ] && ! [[ $agent_id =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]]; then
	die "--agent-id $agent_id: want a lowercase UUID, as 'fleetctl auth agent' prints"
fi
for a in "${agentd_args[@]}" ${destdir:+"$url_template"}; do
	# AGENTD_ARGS is split on white space by systemd.
	[[ $a =~ [[:space:]] ]] && die "agentd flag '$a' contains white space: use a flag=value without spaces, or a drop-in"
done
if [ -z "$destdir" ] && [ "$(id -u)" != 0 ]; then
	die "run as root (or with --destdir to stage the files)"
fi

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
agentd=$(find "$work" -path '*/bin/agentd' -type f | head -n 1)
[ -n "$agentd" ] || die "$tarball has no bin/agentd"
unit=$(find "$work" -name fleetwave-agentd.service -type f | head -n 1)
[ -n "$unit" ] || unit=$here/fleetwave-agentd.service
[ -f "$unit" ] || die "no fleetwave-agentd.service in the tarball or next to install.sh"

if [ -n "$destdir" ]; then
	# Packaging: write update.yaml with the real agentd (which also checks
	# the group) before anything is staged, in a scratch root, so that the
	# agent id it draws there stays there, and without the release URL or
	# the app, so that it installs nothing now. The first 'agentd run' on
	# the host saves the URL (AGENTD_ARGS) and installs.
	scratch=$work/root
	"$agentd" enable --root "$scratch" --nats "$nats" --group "$group" --log-level error >/dev/null ||
		die "agentd enable refused the settings above; nothing staged"
fi

bin=$destdir$prefix/bin
etc=$destdir/etc/fleetwave
state=$destdir$root
install -d -m 0755 "$bin" "$destdir/etc/systemd/system"
install -d -m 0750 "$etc" "$state"

# The binary: copy next to the old one, then rename over it (a running
# agentd keeps its file).
install -m 0755 "$agentd" "$bin/.agentd.new"
mv -f "$bin/.agentd.new" "$bin/agentd"

# The unit, pointed at this prefix and root.
sed -e "s|/usr/local/bin/agentd|$prefix/bin/agentd|" -e "s|/var/lib/fleetwave|$root|g" \
	-e "s|^ReadWritePaths=.*|ReadWritePaths=$root $prefix/bin|" "$unit" >"$destdir/etc/systemd/system/fleetwave-agentd.service"
chmod 0644 "$destdir/etc/systemd/system/fleetwave-agentd.service"

# Credentials: readable by root alone. Never echoed.
install -m 0600 "$creds" "$etc/agent.creds"
env_file=$etc/agentd.env
umask 077
{
	echo "# written by deploy/systemd/install.sh"
	echo "NATS_CREDS=/etc/fleetwave/agent.creds"
	if [ -n "$tls_ca" ]; then
		install -m 0644 "$tls_ca" "$etc/ca.pem"
		echo "NATS_CA=/etc/fleetwave/ca.pem"
	fi
	args=("${agentd_args[@]}")
	# Staged, the release URL reaches update.yaml at the host's first start.
	[ -n "$destdir" ] && [ -n "$url_template" ] && args+=("--url-template=$url_template")
	echo "AGENTD_ARGS=${args[*]}"
} >"$env_file.new"
mv -f "$env_file.new" "$env_file"

# The agent id the creds were minted for, unless the host has one already.
if [ -n "$agent_id" ]; then
	if [ -f "$state/agent_id" ]; then
		have=$(tr -d '[:space:]' <"$state/agent_id")
		[ "$have" = "$agent_id" ] || die "$root/agent_id holds $have, not $agent_id: mint creds for $have instead (fleetctl auth agent --id $have)"
	else
		printf '%s\n' "$agent_id" >"$state/agent_id"
		chmod 0644 "$state/agent_id"
	fi
fi

if [ -n "$destdir" ]; then
	install -m 0644 "$scratch/update.yaml" "$state/update.yaml"
	echo "install.sh: staged $root/update.yaml (bus $nats, group $group, enabled); no agent id: each host draws its own on first start"
else
	enable=("$bin/agentd" enable --root "$state" --nats "$nats" --group "$group" --creds "$etc/agent.creds")
	[ -n "$tls_ca" ] && enable+=(--tls-ca "$etc/ca.pem")
	[ -n "$url_template" ] && enable+=(--url-template "$url_template")
	enable+=("${agentd_args[@]}")
	# A running agentd holds the root ('agentd enable' would fail naming it)
	# and would keep its old flags: stop it; it starts again below.
	if [ "$start" = 1 ] && systemctl is-active --quiet fleetwave-agentd.service 2>/dev/null; then
		echo "install.sh: stopping the running fleetwave-agentd to reconfigure it"
		systemctl stop fleetwave-agentd.service
	fi
	echo "install.sh: ${enable[*]}"
	"${enable[@]}"
fi

if [ "$start" = 1 ]; then
	systemctl daemon-reload
	systemctl enable --now fleetwave-agentd.service
	systemctl --no-pager --lines=0 status fleetwave-agentd.service || true
	# status reads the app settings enable saved; the bus settings of
	# agentd.env it must be given.
	status="$prefix/bin/agentd status --root $root --creds /etc/fleetwave/agent.creds"
	[ -n "$tls_ca" ] && status+=" --tls-ca /etc/fleetwave/ca.pem"
	echo "install.sh: agentd running; 'journalctl -u fleetwave-agentd' shows its log, '$status' its view"
else
	echo "install.sh: staged under ${destdir:-/}; start with: systemctl daemon-reload && systemctl enable --now fleetwave-agentd"
fi
