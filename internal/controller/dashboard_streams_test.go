package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
)

// clientFrom is an HTTP client whose connections come from the local
// address ip (any 127.x.y.z works on Linux): another peer, as the server
// sees it.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: -1}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// refusedStream opens a stream with client (and headers) and wants a JSON
// 503 with Retry-After whose error has want.
func refusedStream(client *http.Client, base, want string, headers ...string) error {
	req, err := http.NewRequest(http.MethodGet, base+controller.PathAPIStream, nil)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct{ Error string }
	switch {
	case resp.StatusCode != http.StatusServiceUnavailable:
		return fmt.Errorf("%s, want 503", resp.Status)
	case resp.Header.Get("Retry-After") == "":
		return errors.New("503 without Retry-After")
	case json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, want):
		return fmt.Errorf("503 body %q: want a JSON error with %q", body, want)
	}
	return nil
}

// TestDashboardStreamPerClient: one address holds at most 16 streams; the
// next from it is a JSON 503, while another address, and a viewer behind
// a proxy on this host (X-Forwarded-For from loopback), still get in.
func TestDashboardStreamPerClient(t *testing.T) {
	const perClient = 16
	f := newFixture(t)
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	hog := clientFrom(t, "127.0.0.1")
	for range perClient {
		ch, c := stream(t, hog, srv.URL)
		t.Cleanup(c)
		go func() {
			for range ch {
			}
		}()
	}
	if err := refusedStream(hog, srv.URL, "16 pages at your address follow this controller already"); err != nil {
		t.Errorf("stream %d from one address: %v", perClient+1, err)
	}
	for _, from := range []struct {
		name    string
		client  *http.Client
		headers []string
	}{
		{"another address", clientFrom(t, "127.0.0.2"), nil},
		{"a viewer behind a proxy on this host", hog, []string{"X-Forwarded-For", "192.0.2.7"}},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+controller.PathAPIStream, nil)
		for i := 0; i+1 < len(from.headers); i += 2 {
			req.Header.Set(from.headers[i], from.headers[i+1])
		}
		resp, err := from.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s, want the stream", from.name, resp.Status)
		}
	}
}

// TestDashboardStreamDropsStalledReader: a page that stops reading its
// stream (a small socket buffer on each side, so that they fill at once)
// is dropped once a write has waited StreamWriteTimeout, and its
// connection closed: it holds no slot.
func TestDashboardStreamDropsStalledReader(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	e := f.startDashboard(rc)
	e.dash.StreamWriteTimeout = 500 * time.Millisecond
	srv := httptest.NewUnstartedServer(e.handler)
	srv.Config.ConnContext = smallSendBuffer
	srv.Start()
	t.Cleanup(srv.Close)

	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) }); err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", controller.PathAPIStream, srv.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	// The page reads nothing more; every push adds to what waits.
	natstest.Eventually(t, waitLong, func() error {
		e.push()
		if n := e.dash.Streams(); n != 0 {
			return fmt.Errorf("%d streams open: the stalled page is not dropped yet", n)
		}
		return nil
	})
	// What the buffers held, then the end: the server closed it.
	_ = conn.SetReadDeadline(time.Now().Add(waitLong))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Errorf("draining the dropped stream: %v, want its end", err)
	}
}

// smallSendBuffer gives a connection a small send buffer, so that a page
// that does not read blocks the server's writes after a few KiB.
func smallSendBuffer(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return ctx
}
