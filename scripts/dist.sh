#!/usr/bin/env bash
# Build fleetwave's release tarball: what deploy/systemd/install.sh installs
# agentd from, and where the controller and fleetctl binaries ship.
#
#   scripts/dist.sh [--version V] [--os linux] [--arch amd64] [--out dist]
#
# writes <out>/fleetwave-<V>-<os>-<arch>.tar.gz and its .sha256, holding
#
#   fleetwave-<V>/bin/agentd, controller, fleetctl   (version V built in)
#   fleetwave-<V>/deploy/systemd/                    (units and install.sh)
#
# and prints the tarball's path. V defaults to internal/version's; os and
# arch to go env GOOS and GOARCH. Binaries are static (CGO_ENABLED=0).
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
	exit 2
}
die() {
	echo "dist.sh: $*" >&2
	exit 1
}

cd "$(dirname "$0")/.."
version="" goos="" goarch="" out=dist
while [ $# -gt 0 ]; do
	case "$1" in
	--version | --os | --arch | --out)
		[ $# -ge 2 ] || { echo "dist.sh: $1 needs a value" >&2; usage; }
		case "$1" in
		--version) version=$2 ;;
		--os) goos=$2 ;;
		--arch) goarch=$2 ;;
		--out) out=$2 ;;
		esac
		shift 2
		;;
	--help | -h) usage ;;
	*) echo "dist.sh: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$version" ] || version=$(sed -n 's/^var Version = "\(.*\)"$/\1/p' internal/version/version.go)
[[ $version =~ ^[0-9A-Za-z][0-9A-Za-z.+_-]*$ ]] || die "--version '$version': want letters, digits, '.', '+', '_' and '-'"
[ -n "$goos" ] || goos=$(go env GOOS)
[ -n "$goarch" ] || goarch=$(go env GOARCH)

name=fleetwave-$version-$goos-$goarch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
top=$work/fleetwave-$version
mkdir -p "$top/bin" "$top/deploy/systemd"
CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
	-ldflags "-X github.com/fleetwave/fleetwave/internal/version.Version=$version" \
	-o "$top/bin/" ./cmd/agentd ./cmd/controller ./cmd/fleetctl
cp deploy/systemd/install.sh deploy/systemd/*.service deploy/systemd/*.timer "$top/deploy/systemd/"
chmod 0755 "$top/deploy/systemd/install.sh"
chmod 0644 "$top"/deploy/systemd/*.service "$top"/deploy/systemd/*.timer

mkdir -p "$out"
tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$work/$name.tar.gz" "fleetwave-$version"
# Both files appear complete or not at all.
mv -f "$work/$name.tar.gz" "$out/$name.tar.gz"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256.new" && mv -f "$name.tar.gz.sha256.new" "$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
