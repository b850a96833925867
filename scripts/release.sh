#!/usr/bin/env bash
# Publish one version of the app into a release site directory, in the
# layout agentd downloads from (--url-template 'BASE/{{.Version}}/app.tar.gz'):
#
#   scripts/release.sh [--key KEY.pem] [--name app.tar.gz] [--app-name NAME] VERSION APPDIR SITEDIR
#
# packs APPDIR (its contents at the tarball's top: bin/app, ...) into
#
#   SITEDIR/VERSION/app.tar.gz            the release
#   SITEDIR/VERSION/app.tar.gz.sha256     its checksum (always checked by agentd)
#   SITEDIR/VERSION/app.tar.gz.statement  with --key: what is signed, naming the
#                                         app, the version, the file, its size
#                                         and sha256 (see below)
#   SITEDIR/VERSION/app.tar.gz.sig        with --key: the Ed25519 signature of
#                                         the statement, checked by agentds
#                                         given --public-key
#
# The statement is exactly these lines (docs/agent.md, "Release signatures"):
#
#   fleetwave-release-statement v1
#   app: NAME
#   version: VERSION
#   file: app.tar.gz
#   size: BYTES
#   sha256: HEX
#
# agentd builds the same text from what it asked for and downloaded, and
# verifies the signature over it: a signature of one version is worthless
# for another. NAME is --app-name, by default the file name without
# .tar.gz/.tgz (app.tar.gz: app), as agentd's --app-name defaults.
#
# A version already published is refused: agents cache what they fetched,
# so a version's bytes must never change. Serve SITEDIR with any static web
# server, e.g. 'go run ./test/cmd/releases --dir SITEDIR --addr :8088'.
#
#   scripts/release.sh --new-key KEY.pem   # writes KEY.pem (0600) and
#                                          # KEY.pem.pub, for agentd --public-key
#
#   scripts/release.sh --key KEY.pem [--name F] [--app-name NAME] --resign VERSION SITEDIR
#
# signs a published version again, as this script signs now: a release
# signed by an older release.sh (its .sig covers the .sha256 file, which
# names no version) is refused by agentd ("signed the old way"). The
# tarball and its .sha256 are checked and left as they are; the .statement
# and .sig are written (replaced).
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

key="" name=app.tar.gz newkey="" app_name="" resign=false
while [ $# -gt 0 ]; do
	case "$1" in
	--key | --name | --new-key | --app-name)
		[ $# -ge 2 ] || { echo "release.sh: $1 needs a value" >&2; usage; }
		case "$1" in
		--key) key=$2 ;;
		--name) name=$2 ;;
		--new-key) newkey=$2 ;;
		--app-name) app_name=$2 ;;
		esac
		shift 2
		;;
	--resign) resign=true; shift ;;
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

if $resign; then
	[ $# -eq 2 ] || { echo "release.sh: --resign wants VERSION SITEDIR" >&2; usage; }
	version=$1 site=$2 app=""
	[ -n "$key" ] || die "--resign needs --key"
else
	[ $# -eq 3 ] || { echo "release.sh: want VERSION APPDIR SITEDIR" >&2; usage; }
	version=$1 app=$2 site=$3
fi
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] ||
	die "version '$version': want MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], e.g. 1.4.2"
[[ $name =~ ^[0-9A-Za-z._-]+$ && $name != . && $name != .. ]] || die "--name '$name': want a file name"
if [ -z "$app_name" ]; then
	case $name in
	*.tar.gz) app_name=${name%.tar.gz} ;;
	*.tgz) app_name=${name%.tgz} ;;
	*) app_name=$name ;;
	esac
	[[ $app_name =~ ^[a-z][a-z0-9-]{0,31}$ ]] ||
		die "--name '$name' implies no app name (want NAME.tar.gz, NAME like [a-z][a-z0-9-]*): pass --app-name NAME, as agentd --app-name"
fi
[[ $app_name =~ ^[a-z][a-z0-9-]{0,31}$ ]] || die "--app-name '$app_name': want a lowercase name ([a-z][a-z0-9-]{0,31})"
if [ -n "$key" ]; then
	[ -f "$key" ] || die "--key $key: no such file"
	command -v openssl >/dev/null || die "openssl is needed to sign"
fi

# sign DIR: write DIR/$name.statement, what agentd verifies (docs/agent.md),
# and DIR/$name.sig, its Ed25519 signature (base64).
sign() {
	local d=$1 size sum
	size=$(wc -c <"$d/$name" | tr -d ' ')
	sum=$(sha256sum "$d/$name" | cut -d' ' -f1)
	printf 'fleetwave-release-statement v1\napp: %s\nversion: %s\nfile: %s\nsize: %s\nsha256: %s\n' \
		"$app_name" "$version" "$name" "$size" "$sum" >"$d/$name.statement.new"
	openssl pkeyutl -sign -inkey "$key" -rawin -in "$d/$name.statement.new" -out "$d/$name.sig.raw" ||
		die "openssl could not sign with $key (want an Ed25519 private key, e.g. from --new-key)"
	base64 <"$d/$name.sig.raw" | tr -d '\n' >"$d/$name.sig.new"
	rm -f "$d/$name.sig.raw"
	chmod 0644 "$d/$name.statement.new" "$d/$name.sig.new"
}

dir=$site/$version
if $resign; then
	[ -f "$dir/$name" ] || die "$dir/$name: no such release (--resign signs a published version; --name if its file is not $name)"
	[ -f "$dir/$name.sha256" ] || die "$dir/$name.sha256: missing"
	(cd "$dir" && sha256sum --quiet -c "$name.sha256" >/dev/null 2>&1) || die "$dir/$name does not match its .sha256: not signing it"
	trap 'rm -f "$dir/$name.statement.new" "$dir/$name.sig.new" "$dir/$name.sig.raw"' EXIT
	sign "$dir"
	# The statement first: until the .sig is renamed, the old one stands.
	mv "$dir/$name.statement.new" "$dir/$name.statement"
	mv "$dir/$name.sig.new" "$dir/$name.sig"
	trap - EXIT
	echo "$dir/$name.sig"
	exit 0
fi
[ -d "$app" ] || die "$app: not a directory"
[ -n "$(ls -A "$app")" ] || die "$app is empty"
[ -e "$dir" ] && die "$dir exists: version $version is published already (a version's bytes never change; publish a new version, or --resign it)"

mkdir -p "$site"
# Build in a hidden sibling, then rename: the version appears complete or
# not at all, and a failure leaves the site as it was.
tmp=$(mktemp -d "$site/.$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$app" && ls -A) | tar -C "$app" --owner=0 --group=0 --numeric-owner -czf "$tmp/$name" -T -
(cd "$tmp" && sha256sum "$name" >"$name.sha256")
if [ -n "$key" ]; then
	sign "$tmp"
	mv "$tmp/$name.statement.new" "$tmp/$name.statement"
	mv "$tmp/$name.sig.new" "$tmp/$name.sig"
fi
chmod 0755 "$tmp"
chmod 0644 "$tmp"/*
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/$name"
