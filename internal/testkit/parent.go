package testkit

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ParentAnswer is what a fake parent proxy does with one request for a
// target ("host:port"): Status 0 forwards it (a CONNECT is tunnelled, an
// absolute-form request sent on), any other status is the parent's own
// answer with Header, and Drop answers nothing.
type ParentAnswer struct {
	Status int
	Header http.Header
	// Drop closes the connection without an answer, as a parent that
	// crashes or resets does.
	Drop bool
}

// Parent is a fake parent proxy on loopback, for the answers a real one
// (squid) cannot easily be made to give: a Proxy-Status header, a 407 on
// demand, a 503 for one target only. It wants Proxy-Authorization to be
// Auth when Auth is set (407 otherwise), asks Decide what to do with each
// request (nil: forward everything), and remembers what it saw.
type Parent struct {
	// Auth is the Proxy-Authorization value wanted; "" wants none.
	Auth string
	// Decide chooses, per request, between forwarding and the parent's own
	// answer. It may be set before the first request only.
	Decide func(r *http.Request) ParentAnswer

	URL      string // "http://127.0.0.1:port"
	Addr     string
	ln       net.Listener
	srv      *http.Server
	connects atomic.Int64
	forwards atomic.Int64
	mu       sync.Mutex
	auths    []string
	seen     []string
}

// StartParent starts p on a fresh loopback port; it is stopped at cleanup.
func StartParent(t testing.TB, p *Parent) *Parent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ln, p.Addr, p.URL = ln, ln.Addr().String(), "http://"+ln.Addr().String()
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(p.Stop)
	return p
}

// Stop closes the parent: connections to its port are refused from now on.
// The listener is closed here too, since Serve may not have taken it yet.
func (p *Parent) Stop() {
	_ = p.ln.Close()
	_ = p.srv.Close()
}

// Connects is how many CONNECTs the parent tunnelled; Forwards how many
// absolute-form requests it sent on.
func (p *Parent) Connects() int64 { return p.connects.Load() }

// Forwards is how many absolute-form requests the parent sent on.
func (p *Parent) Forwards() int64 { return p.forwards.Load() }

// Auths lists the Proxy-Authorization values the parent was sent, in order.
func (p *Parent) Auths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auths...)
}

// Seen lists the requests the parent was sent, in order: "CONNECT
// host:port" or "GET http://host:port/path?query".
func (p *Parent) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// ServeHTTP is the parent's proxy port.
func (p *Parent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("Proxy-Authorization")
	line := r.Method + " " + r.URL.String()
	if r.Method == http.MethodConnect {
		line = r.Method + " " + r.Host
	}
	p.mu.Lock()
	p.auths = append(p.auths, got)
	p.seen = append(p.seen, line)
	p.mu.Unlock()
	if p.Auth != "" && got != p.Auth {
		w.Header().Set("Proxy-Authenticate", `Basic realm="fake parent"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	if p.Decide != nil {
		a := p.Decide(r)
		if a.Drop {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		if a.Status != 0 {
			for k, vs := range a.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(a.Status)
			return
		}
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	p.forward(w, r)
}

// tunnel dials the CONNECT's target and relays bytes both ways.
func (p *Parent) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := net.DialTimeout("tcp", r.Host, 5*time.Second)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer up.Close()
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	p.connects.Add(1)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, buf); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, up); done <- struct{}{} }()
	<-done
}

// forward sends an absolute-form request on, without the headers meant for
// the parent, and copies the answer back.
func (p *Parent) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	resp, err := (&http.Transport{Proxy: nil, DisableKeepAlives: true}).RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	p.forwards.Add(1)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
