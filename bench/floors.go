package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// The open-loop section compares nora-breaker with two floors, each run as
// its own process (a mode of the bench binary) so that its CPU time can be
// read from /proc: the least a Go HTTP server can spend answering a request,
// and the least a Go forward proxy can spend forwarding one.

// bareHandler answers every request with the upstream's 1 KiB body and
// nothing else: no routing, headers prepared once. It is the price of a 200
// from net/http itself, which a synthesized refusal is compared with.
func bareHandler() http.Handler {
	body := make([]byte, smallBody)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	ctype, clen := []string{"application/java-archive"}, []string{strconv.Itoa(len(body))}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = ctype, clen
		w.Write(body)
	})
}

// miniProxy is the smallest forward proxy net/http offers: an absolute-form
// request handed to httputil.ReverseProxy unchanged, over a transport that
// keeps enough idle upstream connections for the harness's load (the default
// of two per host would measure connection churn, not forwarding). No
// CONNECT, no policy, no logging. Every destination must be loopback: the
// harness never sends traffic anywhere else.
func miniProxy() http.Handler {
	rp := &httputil.ReverseProxy{
		// An absolute-form request already names its destination: the
		// request sent is the one received, less hop-by-hop headers.
		Rewrite: func(*httputil.ProxyRequest) {},
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         loopbackOnlyDial,
			MaxIdleConns:        512,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     5 * time.Minute,
			DisableCompression:  true,
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() || r.URL.Scheme != "http" {
			http.Error(w, "mini proxy: only absolute-form http:// requests", http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// loopbackOnlyDial is loopbackDial for addresses that end on 127.0.0.0/8 or
// ::1 and an error before dialling for anything else.
func loopbackOnlyDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); !isBenchHost(host) && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("mini proxy: %s is not a loopback address", addr)
	}
	return loopbackDial(ctx, network, addr)
}

// runBare is the "bare" subcommand: bareHandler on --listen until SIGTERM.
func runBare(args []string) error { return serveFloor("bare", bareHandler(), args) }

// runMiniProxy is the "miniproxy" subcommand: miniProxy on --listen until
// SIGTERM.
func runMiniProxy(args []string) error { return serveFloor("miniproxy", miniProxy(), args) }

// serveFloor serves h on --listen (port 0 by default) and, once bound,
// writes {"listen": address} to --addr-file for the harness to read.
func serveFloor(name string, h http.Handler, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listener address")
	addrFile := fs.String("addr-file", "", `once bound, write {"listen": address} here`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	if *addrFile != "" {
		if err := listenaddr.WriteFile(*addrFile, map[string]string{"listen": ln.Addr().String()}); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
