// Command releases serves app releases over HTTP, for the demo and for
// trying fleetwave by hand:
//
//	releases --addr 127.0.0.1:8088 --release 1.0.0=good --release 2.0.0=crash
//
// serves stand-in releases built on the fly (an app that runs, or one that
// exits at start), and
//
//	releases --addr 127.0.0.1:8088 --dir site
//
// serves the files of a release site directory as they are, e.g. one that
// scripts/release.sh publishes into (site/<version>/app.tar.gz, .sha256,
// .sig). The first line of output is the agentd --url-template to use.
package main

import (
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
	dir := flag.String("dir", "", "serve this release site directory (<version>/app.tar.gz, .sha256, .sig) instead of stand-in releases")
	var specs []string
	flag.Func("release", "VERSION=good|crash (repeat)", func(s string) error { specs = append(specs, s); return nil })
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected argument %q (flags: --addr, --dir, --release)", flag.Arg(0))
	}
	var h http.Handler
	switch {
	case *dir != "" && len(specs) > 0:
		log.Fatal("--dir and --release exclude each other")
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
		srv := releases.NewServer(nil)
		for _, s := range specs {
			v, b, ok := strings.Cut(s, "=")
			if !ok || (b != string(releases.Good) && b != string(releases.Crash)) {
				log.Fatalf("--release %q: want VERSION=good or VERSION=crash", s)
			}
			if err := srv.Add(v, releases.Behaviour(b)); err != nil {
				log.Fatal(err)
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
