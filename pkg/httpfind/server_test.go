package httpfind

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fleetwave test controller"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// runServer runs s on a loopback port until the test ends and returns its
// address; the test fails if Serve does not return nil on shutdown.
func runServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve after shutdown: %v", err)
		}
	})
	return ln.Addr().String()
}

func findHandler() *Handler {
	return &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))}
}

// TestServe: plain HTTP, and a graceful stop that closes the port.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- (&Server{Handler: findHandler()}).Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	got, err := (&Client{URLs: []string{url}}).Find(t.Context(), idLow, testGroup)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(doneAnswer, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v, want nil", err)
	}
	if _, err := (&Client{URLs: []string{url}}).Find(t.Context(), idLow, testGroup); err == nil {
		t.Fatal("the server still answers after shutdown")
	}
}

func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	addr := runServer(t, &Server{Handler: findHandler(), CertFile: certFile, KeyFile: keyFile})

	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(trusting.CloseIdleConnections)
	got, err := (&Client{URLs: []string{"https://" + addr}, HTTP: trusting}).Find(t.Context(), idLow, testGroup)
	if err != nil {
		t.Fatalf("over TLS with the CA trusted: %v", err)
	}
	if diff := cmp.Diff(doneAnswer, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	t.Run("plain HTTP to the TLS port", func(t *testing.T) {
		_, err := (&Client{URLs: []string{"http://" + addr}}).Find(t.Context(), idLow, testGroup)
		if err == nil {
			t.Fatal("a plain HTTP request got an answer from the TLS server")
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		_, err := (&Client{URLs: []string{"https://" + addr}}).Find(t.Context(), idLow, testGroup)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("err %v, want x509.UnknownAuthorityError", err)
		}
	})
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
		if _, err := (&Client{URLs: []string{"https://" + addr}, HTTP: old}).Find(t.Context(), idLow, testGroup); err == nil {
			t.Fatal("a TLS 1.1 client got an answer")
		}
	})
	t.Run("HTTP/2 offered", func(t *testing.T) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Errorf("negotiated %q, want h2", p)
		}
	})
}

// TestServeTLSFiles: a bad TLS setup fails the start, with the listener
// closed, instead of failing every handshake later.
func TestServeTLSFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	tests := []struct {
		name        string
		cert, key   string
		wantInError string
	}{
		{"cert without key", certFile, "", "both"},
		{"key without cert", "", keyFile, "both"},
		{"missing files", filepath.Join(dir, "nope.pem"), keyFile, "nope.pem"},
		{"key and cert swapped", keyFile, certFile, "load TLS certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			err = (&Server{Handler: findHandler(), CertFile: tc.cert, KeyFile: tc.key}).Serve(t.Context(), ln)
			if err == nil || !strings.Contains(err.Error(), tc.wantInError) {
				t.Fatalf("err %v, want one mentioning %q", err, tc.wantInError)
			}
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				c.Close()
				t.Error("the listener is still open")
			}
		})
	}
}

func TestListenAndServeBadAddr(t *testing.T) {
	if err := (&Server{Handler: findHandler()}).ListenAndServe(t.Context(), "127.0.0.1:-1"); err == nil {
		t.Fatal("no error for a bad address")
	}
}
