package natsutil

import (
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/fleetwave/fleetwave/internal/cliutil"
)

// TLS names the PEM files of a client's TLS settings. With none set the
// connection still upgrades to TLS when the server demands it (a tls://
// URL, or a server with TLS required), trusting the system's roots.
type TLS struct {
	// CA is a bundle of CA certificates that may sign the server's
	// certificate (instead of the system roots).
	CA string
	// Cert and Key are the client's certificate and key, for servers that
	// verify clients (mutual TLS). Both or neither.
	Cert string
	Key  string
}

// Register adds --tls-ca, --tls-cert and --tls-key to fs, with the nats
// CLI's environment variables NATS_CA, NATS_CERT and NATS_KEY as defaults.
func (t *TLS) Register(fs *pflag.FlagSet) {
	fs.StringVar(&t.CA, "tls-ca", cliutil.Env("", "NATS_CA"), "PEM file of CA certificates to trust for the NATS server (env NATS_CA)")
	fs.StringVar(&t.Cert, "tls-cert", cliutil.Env("", "NATS_CERT"), "PEM client certificate for servers that verify clients (env NATS_CERT)")
	fs.StringVar(&t.Key, "tls-key", cliutil.Env("", "NATS_KEY"), "PEM key of --tls-cert (env NATS_KEY)")
}

// Validate reports a half-given client certificate as a usage error.
func (t TLS) Validate() error {
	if (t.Cert == "") != (t.Key == "") {
		return cliutil.Usagef("--tls-cert and --tls-key go together: give both or neither")
	}
	return nil
}

func (t TLS) options() []nats.Option {
	var opts []nats.Option
	if t.CA != "" {
		opts = append(opts, nats.RootCAs(t.CA))
	}
	if t.Cert != "" || t.Key != "" {
		opts = append(opts, nats.ClientCert(t.Cert, t.Key))
	}
	return opts
}
