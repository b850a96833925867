package controller

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetwave/fleetwave/internal/cliutil"
)

// WebhookFlags are the --webhook flags of "controller run".
type WebhookFlags struct {
	// URLs are the --webhook values: URL or FORMAT=URL.
	URLs []string
	// Format is the format of a bare URL.
	Format string
	// SecretFile holds the HMAC key; the secret is never a flag's value
	// (a command line is visible to every user of the host).
	SecretFile string
	Events     []string
	MaxAge     time.Duration
	Timeout    time.Duration
}

// Register adds the flags to fs.
func (w *WebhookFlags) Register(fs *pflag.FlagSet) {
	var def []string
	for _, k := range DefaultWebhookKinds {
		def = append(def, string(k))
	}
	// StringArray, not StringSlice: a URL may hold a comma.
	fs.StringArrayVar(&w.URLs, "webhook", nil, "POST rollout events to this URL (repeatable); slack=URL or json=URL gives one webhook its own format (docs/controller.md#webhooks)")
	fs.StringVar(&w.Format, "webhook-format", string(WebhookJSON), "format of the --webhook URLs without a json= or slack= prefix: json (signed payload) or slack ({\"text\": …})")
	fs.StringVar(&w.SecretFile, "webhook-secret-file", "", "file holding the secret the X-Fleetwave-Signature HMAC-SHA256 is keyed with (not world-readable); none: unsigned")
	fs.StringSliceVar(&w.Events, "webhook-events", def, "event kinds to POST, comma separated: transition, halt, alert, approval_needed, quarantine, unattributed, frozen, unfrozen, vanished, held, resumed, canary_replaced, operator; audit (fleetctl's audit records); all")
	fs.DurationVar(&w.MaxAge, "webhook-max-age", DefaultWebhookMaxAge, "retry a webhook POST for at most this long after the event; then drop it (a log line and a metric)")
	fs.DurationVar(&w.Timeout, "webhook-timeout", DefaultWebhookTimeout, "time limit of one webhook POST")
}

// format is the format of a bare URL; zero values (a RunOptions built in
// code) take the defaults.
func (w *WebhookFlags) format() WebhookFormat {
	if w.Format == "" {
		return WebhookJSON
	}
	return WebhookFormat(w.Format)
}

// Validate checks the flags' values as usage errors.
func (w *WebhookFlags) Validate() error {
	if err := ParseWebhookFormat(string(w.format())); err != nil {
		return cliutil.Usagef("--webhook-format: %v", err)
	}
	seen := map[string]bool{}
	for _, s := range w.URLs {
		hook, err := ParseWebhook(s, w.format())
		if err != nil {
			return cliutil.Usagef("--webhook: %v", err)
		}
		if seen[hook.URL] {
			return cliutil.Usagef("--webhook %s: given twice", hook.Name())
		}
		seen[hook.URL] = true
	}
	if _, _, err := ParseWebhookEvents(w.Events); err != nil {
		return cliutil.Usagef("--webhook-events: %v", err)
	}
	if w.MaxAge < 0 {
		return cliutil.Usagef("--webhook-max-age must be positive, got %v", w.MaxAge)
	}
	if w.Timeout < 0 {
		return cliutil.Usagef("--webhook-timeout must be positive, got %v", w.Timeout)
	}
	if len(w.URLs) == 0 && w.SecretFile != "" {
		return cliutil.Usagef("--webhook-secret-file without --webhook: give the URLs to POST to")
	}
	return nil
}

// Notify reads the secret file and returns the controller's webhook
// settings. A secret file others may read, a missing secret and an
// http:// URL to another host are warnings on log.
func (w *WebhookFlags) Notify(log *slog.Logger) (Notify, error) {
	var n Notify
	if len(w.URLs) == 0 {
		return n, nil
	}
	for _, s := range w.URLs {
		hook, err := ParseWebhook(s, w.format())
		if err != nil {
			return n, cliutil.Usagef("--webhook: %v", err)
		}
		n.Webhooks = append(n.Webhooks, hook)
		if strings.HasPrefix(hook.URL, "http://") && !isLoopbackURL(hook.URL) {
			log.Warn("webhook over plain http: events cross the network unencrypted", slog.String("webhook", hook.Name()))
		}
	}
	var err error
	if n.Kinds, n.Audit, err = ParseWebhookEvents(w.Events); err != nil {
		return n, cliutil.Usagef("--webhook-events: %v", err)
	}
	n.MaxAge, n.Timeout = w.MaxAge, w.Timeout
	if w.SecretFile == "" {
		log.Warn("webhooks are not signed (no --webhook-secret-file): receivers cannot tell our POSTs from anyone's")
	} else if n.Secret, err = readWebhookSecret(w.SecretFile, log); err != nil {
		return n, err
	}
	eff := n.withDefaults()
	log.Info("webhooks: the leader POSTs rollout events", slog.Any("webhooks", webhookNames(n.Webhooks)),
		slog.Any("events", eff.Kinds), slog.Bool("audit_records", eff.Audit),
		slog.Bool("signed", len(n.Secret) > 0), slog.Duration("max_age", eff.MaxAge))
	return n, nil
}

// readWebhookSecret reads the secret from path: its contents without the
// surrounding white space (the newline an editor or echo leaves).
func readWebhookSecret(path string, log *slog.Logger) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--webhook-secret-file: %w", err)
	}
	if fi.IsDir() {
		return nil, cliutil.Usagef("--webhook-secret-file %s is a directory", path)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		log.Warn("the webhook secret file is readable by every user of this host: chmod o-r it (or 600)",
			slog.String("file", path), slog.String("mode", fi.Mode().Perm().String()))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--webhook-secret-file: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) == 0 {
		return nil, cliutil.Usagef("--webhook-secret-file %s is empty: put the shared secret in it (e.g. openssl rand -hex 32 > %s)", path, path)
	}
	return secret, nil
}

// isLoopbackURL: the URL's host is this host (a local relay).
func isLoopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && isLoopback(u.Hostname())
}
