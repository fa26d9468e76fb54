package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// clientOpts describes how one target is reached: directly or through a
// proxy, and which roots verify HTTPS.
type clientOpts struct {
	conns   int
	proxy   string // "" = direct
	roots   *x509.CertPool
	timeout time.Duration // per request; 0 = none
	// sessions, when set, is the TLS session cache, shared by the clients
	// given the same one (as one curl process keeps its sessions);
	// nil = every connection a full handshake.
	sessions tls.ClientSessionCache
}

// newClient is the one client every target is driven with: HTTP/1.1,
// keep-alive, at most conns connections, .test names dialled on loopback.
func newClient(o clientOpts) *http.Client {
	tr := &http.Transport{
		DialContext:         loopbackDial,
		MaxIdleConns:        o.conns,
		MaxIdleConnsPerHost: o.conns,
		MaxConnsPerHost:     o.conns,
		IdleConnTimeout:     5 * time.Minute,
		DisableCompression:  true,
		TLSClientConfig:     &tls.Config{RootCAs: o.roots, ClientSessionCache: o.sessions},
		// HTTP/1.1 on purpose: every peer proxy speaks it, and N connections
		// should mean N connections.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		ReadBufferSize:    64 << 10,
	}
	if o.proxy != "" {
		pu, _ := url.Parse(o.proxy)
		tr.Proxy = http.ProxyURL(pu)
	}
	return &http.Client{Transport: tr, Timeout: o.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// loopbackDial sends every name under the bench domain to 127.0.0.1 (same
// port), so HTTPS can be verified by name without DNS; anything else is
// dialled as given, and the harness only ever gives loopback addresses.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && isBenchHost(host) {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// isBenchHost reports whether host is the bench domain or a name under it.
func isBenchHost(host string) bool {
	return host == benchDomain || strings.HasSuffix(host, "."+benchDomain)
}

// loadSpec is one measured run against one target.
type loadSpec struct {
	client   *http.Client
	url      string
	conns    int
	duration time.Duration // stop after this long …
	requests int           // … or after this many requests (0 = no bound)
	want     int           // expected status
	trace    *trace        // when set, every request's time and latency are kept
	distinct bool          // a URL of its own per request (distinctURLs)
}

// distinctURLs hands out base with a query of its own for each request
// (?n=1, ?n=2, …). Identical requests in flight share one fetch through
// nora-breaker (docs/behaviour.md §5.9), so the rows that measure what a
// forwarded request costs never send two alike; every target of such a
// row gets URLs made the same way.
type distinctURLs struct {
	base string
	on   bool
	n    atomic.Int64
}

// next is the URL of the next request: base itself when off.
func (d *distinctURLs) next() string {
	if !d.on {
		return d.base
	}
	sep := "?"
	if strings.Contains(d.base, "?") {
		sep = "&"
	}
	return d.base + sep + "n=" + strconv.FormatInt(d.n.Add(1), 10)
}

// loadResult is what one run measured.
type loadResult struct {
	requests, bad int64
	firstErr      string
	elapsed       time.Duration
	hist          histogram
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// runLoad drives spec.conns workers, each issuing requests back to back on
// its keep-alive connection until the time or count bound is reached.
func runLoad(spec loadSpec) loadResult {
	var (
		issued atomic.Int64
		mu     sync.Mutex
		res    loadResult
		wg     sync.WaitGroup
	)
	start := time.Now()
	if spec.trace != nil {
		spec.trace.start = start
	}
	deadline := start.Add(spec.duration)
	urls := &distinctURLs{base: spec.url, on: spec.distinct}
	for range spec.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h histogram
			var bad int64
			var firstErr string
			var points []tracePoint
			for time.Now().Before(deadline) {
				if spec.requests > 0 && issued.Add(1) > int64(spec.requests) {
					break
				}
				u := urls.next()
				t0 := time.Now()
				status, err := fetch(spec.client, u)
				took := time.Since(t0)
				h.record(took)
				if spec.trace != nil {
					points = append(points, tracePoint{at: t0.Sub(start), latency: took, status: status})
				}
				if err != nil || status != spec.want {
					bad++
					if firstErr == "" {
						firstErr = fmt.Sprintf("status %d, err %v", status, err)
					}
				}
			}
			if spec.trace != nil {
				spec.trace.add(points)
			}
			mu.Lock()
			res.hist.merge(&h)
			res.bad += bad
			if res.firstErr == "" {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.requests = int64(res.hist.n)
	return res
}

// fetch issues one GET and drains the body so the connection is reused.
func fetch(c *http.Client, u string) (int, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}
