package httpfind

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server timeouts. Find answers come from memory in microseconds, so
// anything slow is a stalled or hostile client holding a connection.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 10 * time.Second
	// idleTimeout lets agents and load balancers keep connections alive
	// between polls without the server holding dead ones for ever.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds the request line and headers. A request over
	// it never reaches the Handler: net/http itself answers 431 in plain
	// text and closes (net/http server.go, errTooLarge), which no setting
	// turns into JSON. So the bound is net/http's default, far above any
	// real request, and the Handler refuses a long query itself, as JSON
	// (414). Memory grows only with what a client actually sends, for at
	// most readHeaderTimeout.
	maxHeaderBytes = http.DefaultMaxHeaderBytes
	// DefaultShutdownTimeout is how long in-flight requests get to finish
	// when the context ends.
	DefaultShutdownTimeout = 5 * time.Second
)

// Server serves a Handler over HTTP, or over HTTPS (TLS 1.2 or later, HTTP/2
// offered) when CertFile and KeyFile are both set.
type Server struct {
	Handler http.Handler
	// CertFile and KeyFile are PEM files; both or neither. They are read once
	// at start, so a bad path fails the start rather than every handshake.
	CertFile, KeyFile string
	// ShutdownTimeout bounds the graceful shutdown; 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Log receives start and stop at info level and net/http's own
	// per-connection messages (TLS handshake failures and the like) at debug
	// level, where scanners and probes cannot flood it. Nil discards.
	Log *slog.Logger
}

// ListenAndServe listens on addr (host:port) and serves until ctx ends; see
// Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http find: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then stops accepting, lets requests in
// flight finish for up to ShutdownTimeout and returns nil. It returns an
// error if the TLS files cannot be loaded or serving fails; ln is closed
// either way.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	useTLS := s.CertFile != "" || s.KeyFile != ""
	if useTLS {
		if s.CertFile == "" || s.KeyFile == "" {
			ln.Close()
			return errors.New("http find: TLS needs both a certificate and a key file; give both or neither")
		}
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("http find: load TLS certificate %s and key %s: %w", s.CertFile, s.KeyFile, err)
		}
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}

	done := make(chan error, 1)
	go func() {
		if useTLS {
			done <- srv.ServeTLS(ln, "", "") // certificates are in TLSConfig
		} else {
			done <- srv.Serve(ln)
		}
	}()
	log.Info("http find serving", slog.String("addr", ln.Addr().String()), slog.Bool("tls", useTLS))

	select {
	case err := <-done:
		return fmt.Errorf("http find: %w", err)
	case <-ctx.Done():
	}
	timeout := s.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http find: requests still running at shutdown; closing them", slog.Any("err", err))
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http find: %w", err)
	}
	log.Info("http find stopped", slog.String("addr", ln.Addr().String()))
	return nil
}
