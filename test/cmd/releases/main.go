// Command releases serves app releases over HTTP, for the demo and for
// trying fleetwave by hand:
//
//	releases --addr 127.0.0.1:8088 --release 1.0.0=good --release 2.0.0=crash [--release 2.1.0=replay:1.0.0]
//
// serves stand-in releases built on the fly (an app that runs, or one that
// exits at start), signed with --key KEY.pem (an Ed25519 private key, as
// scripts/release.sh --new-key writes: agentd --public-key KEY.pem.pub),
// and
//
//	releases --addr 127.0.0.1:8088 --dir site
//
// serves the files of a release site directory as they are, e.g. one that
// scripts/release.sh publishes into (site/<version>/app.tar.gz, .sha256,
// .sig). The first line of output is the agentd --url-template to use.
package main

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/fleetwave/fleetwave/test/releases"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	dir := flag.String("dir", "", "serve this release site directory (<version>/app.tar.gz, .sha256, .sig, .statement) instead of stand-in releases")
	keyFile := flag.String("key", "", "sign the stand-in releases with this Ed25519 private key (PEM, as scripts/release.sh --new-key writes)")
	var specs []string
	flag.Func("release", "VERSION=good|crash, or VERSION=replay:OTHER to serve OTHER's files (signature included) as VERSION, as a site in an attacker's hands can (repeat)",
		func(s string) error { specs = append(specs, s); return nil })
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected argument %q (flags: --addr, --dir, --release)", flag.Arg(0))
	}
	var h http.Handler
	switch {
	case *dir != "" && (len(specs) > 0 || *keyFile != ""):
		log.Fatal("--dir serves a site as it is: --release and --key are for stand-in releases")
	case *dir != "":
		fi, err := os.Stat(*dir)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			log.Fatalf("--dir %s: %v", *dir, err)
		}
		h = http.FileServer(http.Dir(*dir))
	default:
		var key ed25519.PrivateKey
		if *keyFile != "" {
			var err error
			if key, err = readKey(*keyFile); err != nil {
				log.Fatalf("--key %s: %v", *keyFile, err)
			}
		}
		srv := releases.NewServer(key)
		var replays [][2]string
		for _, s := range specs {
			v, b, ok := strings.Cut(s, "=")
			if from, replay := strings.CutPrefix(b, "replay:"); ok && replay {
				replays = append(replays, [2]string{v, from})
				continue
			}
			if !ok || (b != string(releases.Good) && b != string(releases.Crash)) {
				log.Fatalf("--release %q: want VERSION=good, VERSION=crash or VERSION=replay:OTHER", s)
			}
			if err := srv.Add(v, releases.Behaviour(b)); err != nil {
				log.Fatal(err)
			}
		}
		for _, r := range replays {
			if err := srv.Replay(r[0], r[1]); err != nil {
				log.Fatalf("--release %s=replay:%s: %v", r[0], r[1], err)
			}
		}
		h = srv
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The first line says where to fetch from; scripts read it.
	fmt.Fprintf(os.Stdout, "%s\n", releases.URLTemplate("http://"+ln.Addr().String()))
	log.Fatal(http.Serve(ln, h))
}

// readKey reads an Ed25519 private key in PEM (PKCS #8), as openssl genpkey
// -algorithm ed25519 writes it.
func readKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an Ed25519 key", k)
	}
	return key, nil
}
