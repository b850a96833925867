// Command releases serves stand-in app releases built on the fly, for the
// demo: releases --addr 127.0.0.1:8088 --release 1.0.0=good --release 2.0.0=crash
package main

import (
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
	var specs []string
	flag.Func("release", "VERSION=good|crash (repeat)", func(s string) error { specs = append(specs, s); return nil })
	flag.Parse()
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
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The first line says where to fetch from; scripts read it.
	fmt.Fprintf(os.Stdout, "%s\n", releases.URLTemplate("http://"+ln.Addr().String()))
	log.Fatal(http.Serve(ln, srv))
}
