package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/destination"
)

// shutdownGrace is how long in-flight requests may take to finish after
// SIGTERM before the process exits anyway.
const shutdownGrace = 25 * time.Second

// Serve runs the proxy listener and the admin listener until ctx ends, then
// stops accepting, lets in-flight requests finish (up to shutdownGrace),
// commits complete stale writes and returns.
func (p *Proxy) Serve(ctx context.Context, proxyLn, adminLn net.Listener) error {
	// From here on no request may reach these two ports on this machine.
	p.own.Store(destination.NewOwn(destination.InterfaceAddrs(), proxyLn.Addr(), adminLn.Addr()))
	errLog := p.errorLog()
	proxySrv := &http.Server{
		Handler:           p.Handler(),
		ReadHeaderTimeout: clientconn.ReadHeaderTimeout,
		IdleTimeout:       p.fixed.idleTimeout,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	adminSrv := &http.Server{
		Handler:           p.AdminHandler(),
		ReadHeaderTimeout: clientconn.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       p.fixed.idleTimeout,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	limited := clientconn.NewListener(proxyLn, p.fixed.maxConnections, p.fixed.idleTimeout)
	errc := make(chan error, 2)
	go func() { errc <- serveUntilClosed(proxySrv, limited) }()
	go func() { errc <- serveUntilClosed(adminSrv, adminLn) }()
	p.log.Info().Str("listen", proxyLn.Addr().String()).Str("admin", adminLn.Addr().String()).
		Bool("interception", p.interceptor != nil).Bool("circuit_breaker", p.breakers.Enabled()).
		Int("upstreams", len(p.Config().Upstreams)).Msg("nora-breaker serving")

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	p.SetShuttingDown()
	p.log.Info().Msg("shutting down: draining in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := proxySrv.Shutdown(sctx); err != nil {
		p.log.Warn().Err(err).Msg("proxy listener did not drain in time")
	}
	_ = adminSrv.Shutdown(sctx)
	if err := p.Close(); err != nil {
		p.log.Warn().Err(err).Msg("closing stale cache")
	}
	return runErr
}

func serveUntilClosed(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// zerologWriter sends net/http's own error log (TLS handshake noise, bad
// requests) to the structured log at debug level.
type zerologWriter struct{ log zerolog.Logger }

func (z zerologWriter) Write(b []byte) (int, error) {
	z.log.Debug().Str("component", "http").Msg(strings.TrimSpace(string(b)))
	return len(b), nil
}
