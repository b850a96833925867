#!/usr/bin/env bash
# Publish one version of the app into a release site directory, in the
# layout agentd downloads from (--url-template 'BASE/{{.Version}}/app.tar.gz'):
#
#   scripts/release.sh [--key KEY.pem] [--name app.tar.gz] VERSION APPDIR SITEDIR
#
# packs APPDIR (its contents at the tarball's top: bin/app, ...) into
#
#   SITEDIR/VERSION/app.tar.gz          the release
#   SITEDIR/VERSION/app.tar.gz.sha256   its checksum (always checked by agentd)
#   SITEDIR/VERSION/app.tar.gz.sig      with --key: the Ed25519 signature of
#                                       the .sha256 file, checked by agentds
#                                       given --public-key
#
# A version already published is refused: agents cache what they fetched,
# so a version's bytes must never change. Serve SITEDIR with any static web
# server, e.g. 'go run ./test/cmd/releases --dir SITEDIR --addr :8088'.
#
#   scripts/release.sh --new-key KEY.pem   # writes KEY.pem (0600) and
#                                          # KEY.pem.pub, for agentd --public-key
#
# Signing uses openssl (1.1.1 or later).
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
	exit 2
}
die() {
	echo "release.sh: $*" >&2
	exit 1
}

key="" name=app.tar.gz newkey=""
while [ $# -gt 0 ]; do
	case "$1" in
	--key | --name | --new-key)
		[ $# -ge 2 ] || { echo "release.sh: $1 needs a value" >&2; usage; }
		case "$1" in
		--key) key=$2 ;;
		--name) name=$2 ;;
		--new-key) newkey=$2 ;;
		esac
		shift 2
		;;
	--help | -h) usage ;;
	--) shift; break ;;
	-*) echo "release.sh: unknown argument $1" >&2; usage ;;
	*) break ;;
	esac
done

if [ -n "$newkey" ]; then
	[ $# -eq 0 ] || { echo "release.sh: --new-key takes no other arguments" >&2; usage; }
	[ -e "$newkey" ] && die "$newkey exists: not overwriting a key"
	command -v openssl >/dev/null || die "openssl is needed to make a key"
	tmp=$(mktemp "$newkey.XXXXXX")
	trap 'rm -f "$tmp"' EXIT
	chmod 0600 "$tmp"
	openssl genpkey -algorithm ed25519 -out "$tmp" 2>/dev/null || die "openssl cannot make an Ed25519 key (want openssl 1.1.1 or later)"
	# agentd --public-key wants the raw 32-byte key, base64: the last 32
	# bytes of the DER public key.
	openssl pkey -in "$tmp" -pubout -outform DER | tail -c 32 | base64 >"$newkey.pub"
	mv "$tmp" "$newkey"
	echo "$newkey (private: keep it where releases are made) and $newkey.pub (give to agentd --public-key)"
	exit 0
fi

[ $# -eq 3 ] || { echo "release.sh: want VERSION APPDIR SITEDIR" >&2; usage; }
version=$1 app=$2 site=$3
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] ||
	die "version '$version': want MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], e.g. 1.4.2"
[[ $name =~ ^[0-9A-Za-z._-]+$ ]] || die "--name '$name': want a file name"
[ -d "$app" ] || die "$app: not a directory"
[ -n "$(ls -A "$app")" ] || die "$app is empty"
if [ -n "$key" ]; then
	[ -f "$key" ] || die "--key $key: no such file"
	command -v openssl >/dev/null || die "openssl is needed to sign"
fi
dir=$site/$version
[ -e "$dir" ] && die "$dir exists: version $version is published already (a version's bytes never change; publish a new version)"

mkdir -p "$site"
# Build in a hidden sibling, then rename: the version appears complete or
# not at all, and a failure leaves the site as it was.
tmp=$(mktemp -d "$site/.$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$app" && ls -A) | tar -C "$app" --owner=0 --group=0 --numeric-owner -czf "$tmp/$name" -T -
(cd "$tmp" && sha256sum "$name" >"$name.sha256")
if [ -n "$key" ]; then
	openssl pkeyutl -sign -inkey "$key" -rawin -in "$tmp/$name.sha256" -out "$tmp/$name.sig.raw" ||
		die "openssl could not sign with $key (want an Ed25519 private key, e.g. from --new-key)"
	base64 <"$tmp/$name.sig.raw" | tr -d '\n' >"$tmp/$name.sig"
	rm -f "$tmp/$name.sig.raw"
fi
chmod 0755 "$tmp"
chmod 0644 "$tmp"/*
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/$name"
