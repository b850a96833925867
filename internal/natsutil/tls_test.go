package natsutil_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
)

// pki is a throw-away CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleetwave test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certPath, keyPath string) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "PRIVATE KEY", keyDER)
	}
	p := pki{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// serverConf writes a nats-server config requiring TLS (and, with
// verifyClients, a client certificate signed by the CA).
func serverConf(t *testing.T, p pki, verifyClients bool) string {
	t.Helper()
	conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: %v\n  timeout: 5\n}\n",
		p.serverCert, p.serverKey, p.ca, verifyClients)
	path := filepath.Join(t.TempDir(), "tls.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTLS(t *testing.T) {
	p := newPKI(t)
	tlsOnly := natstest.StartConfig(t, serverConf(t, p, false))
	mutual := natstest.StartConfig(t, serverConf(t, p, true))
	cases := []struct {
		name    string
		srv     *natstest.Server
		tls     natsutil.TLS
		wantErr string // "" connects
	}{
		{"server TLS, client trusts the CA", tlsOnly, natsutil.TLS{CA: p.ca}, ""},
		{"server TLS, client without the CA", tlsOnly, natsutil.TLS{}, "certificate signed by unknown authority"},
		{"mutual TLS, client cert", mutual, natsutil.TLS{CA: p.ca, Cert: p.clientCert, Key: p.clientKey}, ""},
		{"mutual TLS, no client cert", mutual, natsutil.TLS{CA: p.ca}, "tls"},
		{"half a client cert", mutual, natsutil.TLS{CA: p.ca, Cert: p.clientCert}, "--tls-cert and --tls-key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: c.srv.URL(), Name: "tls-test", TLS: c.tls, Log: natstest.Logger(t)})
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer nc.Close()
				if !nc.TLSRequired() {
					t.Error("connection is not TLS")
				}
				if err := nc.Flush(); err != nil {
					t.Errorf("flush over TLS: %v", err)
				}
				return
			}
			if err == nil {
				nc.Close()
				t.Fatalf("connected; want a refusal mentioning %q", c.wantErr)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.wantErr)) {
				t.Errorf("error %q does not mention %q", err, c.wantErr)
			}
		})
	}
}

func TestTLSFlagsFallBackToNATSEnvironment(t *testing.T) {
	t.Setenv("NATS_CA", "/etc/ca.pem")
	t.Setenv("NATS_CERT", "/etc/c.pem")
	t.Setenv("NATS_KEY", "/etc/k.pem")
	var got natsutil.TLS
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	got.Register(fs)
	if err := fs.Parse([]string{"--tls-key", "/other/k.pem"}); err != nil {
		t.Fatal(err)
	}
	want := natsutil.TLS{CA: "/etc/ca.pem", Cert: "/etc/c.pem", Key: "/other/k.pem"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
