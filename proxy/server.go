package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/destination"
)

// shutdownGrace is how long in-flight requests may take to finish after
// SIGTERM before the process exits anyway (Deps.ShutdownGrace overrides it).
const shutdownGrace = 25 * time.Second

// Serve runs the proxy listener and the admin listener until ctx ends, then
// drains every connection kind alike (docs/behaviour.md §10): /ready says
// 503 from the first moment, the proxy port stops accepting, plain
// requests in flight finish, intercepted connections finish the request in
// flight and close (HTTP/2: GOAWAY, the open streams finish), blind tunnels
// and protocol switches go on relaying; at the end of the grace period
// what is left is closed. Then complete stale writes are committed and
// Serve returns.
func (p *Proxy) Serve(ctx context.Context, proxyLn, adminLn net.Listener) error {
	// From here on no request may reach these two ports on this machine.
	p.own.Store(destination.NewOwn(destination.InterfaceAddrs(), proxyLn.Addr(), adminLn.Addr()))
	errLog := p.errorLog()
	fresh := &freshConns{}
	proxySrv := &http.Server{
		Handler:           p.Handler(),
		ConnState:         fresh.track,
		ReadHeaderTimeout: clientconn.ReadHeaderTimeout,
		IdleTimeout:       p.fixed.idleTimeout,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	adminSrv := &http.Server{
		Handler:           p.AdminHandler(adminLn.Addr()),
		ReadHeaderTimeout: clientconn.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       p.fixed.idleTimeout,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	limited := clientconn.NewListener(proxyLn, p.fixed.maxConnections, p.fixed.idleTimeout)
	limited.OnAcceptError = p.acceptFailed
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
	grace := p.deps.ShutdownGrace
	if grace <= 0 {
		grace = shutdownGrace
	}
	p.log.Info().Dur("grace", grace).Int("hijacked", p.drainers.Len()).
		Msg("shutting down: draining requests, tunnels and intercepted connections in flight")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	// A CONNECT or a protocol switch in flight leaves net/http's count when
	// it hijacks its connection: the drain goes on until the server has
	// stopped and every such handler has handed its connection over.
	stopped := make(chan struct{})
	wg.Go(func() {
		defer close(stopped)
		drainFresh(sctx, proxySrv, limited, fresh)
		if err := proxySrv.Shutdown(sctx); err != nil {
			p.log.Warn().Err(err).Msg("plain requests did not finish in time: closing them")
			_ = proxySrv.Close()
		}
	})
	wg.Go(func() {
		if n := p.drainers.Drain(sctx, stopped); n > 0 {
			p.log.Warn().Int("closed", n).Msg("tunnels and intercepted connections did not finish in time: closed")
		}
	})
	wg.Wait()
	p.log.Info().Msg("drained")
	// The admin listener last: /ready has said 503 all along.
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = adminSrv.Shutdown(actx)
	if err := p.Close(); err != nil {
		p.log.Warn().Err(err).Msg("closing stale cache")
	}
	return runErr
}

// acceptFailed makes a failed accept on the proxy port visible: a warning
// (at most acceptLogBurst a second, the rest counted in the next one) and,
// for this machine's own faults (out of file descriptors), the local
// faults counter (docs/behaviour.md §5.1). net/http retries the accept.
func (p *Proxy) acceptFailed(err error) {
	p.sender.CountLocalFault(err)
	if ok, suppressed := p.acceptLog.allow(); ok {
		p.log.Warn().Err(err).Int64("suppressed", suppressed).Msg("accepting a client connection failed: retrying")
	}
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
