package dial

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/route"
)

// rig is an Egress built from a configuration the way a snapshot builds
// it, with the parents' breakers in a set of their own and the log in a
// buffer.
type rig struct {
	cfg      *config.Config
	egress   *Egress
	breakers *breakerstate.Set
	logs     *testkit.SyncBuffer
}

func newRig(t *testing.T, tomlText string) *rig {
	t.Helper()
	cfg := testkit.LoadConfig(t, tomlText, nil)
	var keys []breakerstate.KeySettings
	for _, p := range cfg.Parents() {
		bs := cfg.ParentThresholds(p)
		keys = append(keys, breakerstate.KeySettings{Key: p.Key(), Format: config.ParentFormat,
			FailureThreshold: bs.FailureThreshold, ResetTimeout: bs.ResetTimeout})
	}
	set, err := breakerstate.New(breakerstate.Options{Enabled: true, Keys: keys, Now: time.Now,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	table := route.NewTable(cfg.Upstreams)
	tr, err := NewTransport(SettingsOf(cfg, table), nil, Deps{Breakers: set, Logger: zerolog.New(logs), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &rig{cfg: cfg, egress: NewEgress(tr, cfg, route.NewRouter(table, nil)), breakers: set, logs: logs}
}

// breaker is key's breaker as the set shows it.
func (r *rig) breaker(t *testing.T, key string) breakerstate.Snapshot {
	t.Helper()
	for _, s := range r.breakers.Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no breaker %s", key)
	return breakerstate.Snapshot{}
}

// get sends a GET for rawURL through the egress.
func (r *rig) get(t *testing.T, rawURL string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.egress.RoundTrip(req)
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

// seen is an upstream that records the Proxy-Authorization headers it was
// sent (it must never be sent one).
type seen struct {
	mu    sync.Mutex
	auths []string
	hits  int
}

func (s *seen) handler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits++
	if v := r.Header.Get("Proxy-Authorization"); v != "" {
		s.auths = append(s.auths, v)
	}
	s.mu.Unlock()
	io.WriteString(w, "artifact")
}

func (s *seen) counts() (hits int, auths []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits, append([]string(nil), s.auths...)
}

// caFile writes srv's certificate as a PEM file for upstream_ca.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mavenConf(sidecar string, urls ...string) string {
	return fmt.Sprintf("[registries]\nenable = \"maven\"\n[maven]\nproxies = [%s]\n[sidecar]\n%s\n",
		`"`+strings.Join(urls, `", "`)+`"`, sidecar)
}

// TestThroughTheParent: an https upstream is reached through a CONNECT
// tunnel and a plain http one in absolute form, both carrying the
// parent's credentials to the parent alone; each connection the parent
// opened is a success for its breaker.
func TestThroughTheParent(t *testing.T) {
	var tlsUp, plainUp seen
	secure := httptest.NewTLSServer(http.HandlerFunc(tlsUp.handler))
	t.Cleanup(secure.Close)
	plain := httptest.NewServer(http.HandlerFunc(plainUp.handler))
	t.Cleanup(plain.Close)
	auth := basicAuth("bot", "s3cret")
	parent := testkit.StartParent(t, &testkit.Parent{Auth: auth})
	r := newRig(t, mavenConf(fmt.Sprintf("upstream_ca = %q\nparent_proxy = \"http://bot:s3cret@%s\"", caFile(t, secure), parent.Addr),
		secure.URL+"/m2", plain.URL+"/m2"))
	key := "parent:http://" + parent.Addr
	// A failure first, so the successes below have a count to reset.
	if _, err := r.breakers.Admit(key); err != nil {
		t.Fatal(err)
	}
	t0, _ := r.breakers.Admit(key)
	t0.Done(breakerstate.Failure)

	for _, u := range []string{secure.URL + "/m2/a.jar", plain.URL + "/m2/a.jar"} {
		resp, err := r.get(t, u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(body) != "artifact" {
			t.Fatalf("%s: %d %q", u, resp.StatusCode, body)
		}
	}
	if parent.Connects() != 1 || parent.Forwards() != 1 {
		t.Fatalf("the parent tunnelled %d and forwarded %d requests, want 1 and 1", parent.Connects(), parent.Forwards())
	}
	for _, a := range parent.Auths() {
		if a != auth {
			t.Fatalf("the parent was sent Proxy-Authorization %q, want the configured credentials", a)
		}
	}
	for name, s := range map[string]*seen{"https": &tlsUp, "http": &plainUp} {
		if hits, auths := s.counts(); hits != 1 || len(auths) != 0 {
			t.Fatalf("%s upstream: %d requests, Proxy-Authorization %q; want 1 and none", name, hits, auths)
		}
	}
	if b := r.breaker(t, key); b.FailureCount != 0 || b.State != breakerstate.Closed {
		t.Fatalf("parent breaker %+v, want closed with the count reset by the successes", b)
	}
}

// TestParentDownIsTheParentsFault: a parent that refuses connections fails
// the attempt with an error wrapping attempt.ErrParent (neutral for the
// upstream) and counts for the parent's breaker, which once open refuses
// without dialling.
func TestParentDownIsTheParentsFault(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	parent := testkit.StartParent(t, &testkit.Parent{})
	parent.Stop()
	r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = %q\n[circuit_breaker.overrides.parent]\nfailure_threshold = 2",
		parent.URL), up.URL+"/m2"))
	key := "parent:" + parent.URL
	for i := range 2 {
		_, err := r.get(t, up.URL+"/m2/a.jar")
		var pe *ParentError
		if !errors.As(err, &pe) || pe.Fault != FaultUnreachable || !errors.Is(err, attempt.ErrParent) {
			t.Fatalf("attempt %d: err = %v, want the parent unreachable", i, err)
		}
		if got := attempt.Decide(nil, err, context.Background()); got != breakerstate.Neutral {
			t.Fatalf("the upstream's verdict is %v, want neutral", got)
		}
	}
	if b := r.breaker(t, key); b.State != breakerstate.Open {
		t.Fatalf("parent breaker %+v after two refused dials, want open", b)
	}
	_, err := r.get(t, up.URL+"/m2/a.jar")
	var pe *ParentError
	if !errors.As(err, &pe) || pe.Fault != FaultOpen || !errors.Is(err, breakerstate.ErrOpen) {
		t.Fatalf("with the breaker open: %v, want FaultOpen", err)
	}
}

// TestParentAnswers: what each answer of the parent means, to a CONNECT
// (https upstream) and to an absolute-form request (http upstream), for
// the upstream (the error, or the answer passed on) and for the parent's
// breaker.
func TestParentAnswers(t *testing.T) {
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(secure.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(plain.Close)
	for _, tc := range []struct {
		name   string
		answer testkit.ParentAnswer
		// fault is the ParentError's; "" for an error that is the
		// upstream's (UpstreamError through CONNECT, the answer itself in
		// absolute form).
		fault  Fault
		parent breakerstate.Outcome // the parent breaker's verdict
		logged bool
	}{
		{name: "503 about the upstream", answer: testkit.ParentAnswer{Status: 503}, parent: breakerstate.Success},
		{name: "502 with Proxy-Status about the upstream", answer: testkit.ParentAnswer{Status: 502,
			Header: http.Header{"Proxy-Status": {`squid; error=connection_refused; details="no route"`}}},
			parent: breakerstate.Success},
		{name: "504 about the upstream", answer: testkit.ParentAnswer{Status: 504,
			Header: http.Header{"Proxy-Status": {"edge; error=http_response_timeout, corp-proxy; error=connection_timeout"}}},
			parent: breakerstate.Success},
		{name: "407", answer: testkit.ParentAnswer{Status: 407}, fault: FaultConfig, parent: breakerstate.Neutral, logged: true},
		{name: "its own internal error", answer: testkit.ParentAnswer{Status: 500,
			Header: http.Header{"Proxy-Status": {"corp-proxy; error=proxy_internal_error"}}},
			fault: FaultInternal, parent: breakerstate.Failure},
		{name: "a loop it found", answer: testkit.ParentAnswer{Status: 502,
			Header: http.Header{"Proxy-Status": {"corp-proxy; error=proxy_loop_detected"}}},
			fault: FaultConfig, parent: breakerstate.Neutral, logged: true},
	} {
		for _, scheme := range []string{"https", "http"} {
			t.Run(tc.name+" "+scheme, func(t *testing.T) {
				answer := tc.answer
				parent := testkit.StartParent(t, &testkit.Parent{Decide: func(*http.Request) testkit.ParentAnswer { return answer }})
				r := newRig(t, mavenConf(fmt.Sprintf("upstream_ca = %q\nparent_proxy = \"http://bot:hunter2@%s\"\n"+
					"[circuit_breaker.overrides.parent]\nfailure_threshold = 1", caFile(t, secure), parent.Addr),
					secure.URL+"/m2", plain.URL+"/m2"))
				target := plain.URL
				if scheme == "https" {
					target = secure.URL
				}
				resp, err := r.get(t, target+"/m2/a.jar")
				var pe *ParentError
				var ue *UpstreamError
				switch {
				case tc.fault != "":
					if !errors.As(err, &pe) || pe.Fault != tc.fault || !errors.Is(err, attempt.ErrParent) {
						t.Fatalf("err = %v, want a %s ParentError", err, tc.fault)
					}
				case scheme == "https":
					if !errors.As(err, &ue) || ue.Status != answer.Status || errors.Is(err, attempt.ErrParent) {
						t.Fatalf("err = %v, want the parent's %d about the upstream", err, answer.Status)
					}
					if got := attempt.Decide(nil, err, context.Background()); got != breakerstate.Failure {
						t.Fatalf("the upstream's verdict %v, want the failure a direct dial error is", got)
					}
				default:
					if err != nil || resp.StatusCode != answer.Status {
						t.Fatalf("%v %v, want the parent's %d passed on as the upstream's answer", resp, err, answer.Status)
					}
				}
				if err != nil && strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("the error shows the password: %v", err)
				}
				b := r.breaker(t, "parent:http://"+parent.Addr)
				switch tc.parent {
				case breakerstate.Failure:
					if b.State != breakerstate.Open {
						t.Fatalf("parent breaker %+v, want open after its failure", b)
					}
				default:
					if b.State != breakerstate.Closed || b.FailureCount != 0 {
						t.Fatalf("parent breaker %+v, want closed with nothing counted", b)
					}
				}
				logs := r.logs.String()
				if tc.logged != strings.Contains(logs, "parent proxy configuration error") {
					t.Fatalf("logged %v, want %v:\n%s", !tc.logged, tc.logged, logs)
				}
				if strings.Contains(logs, "hunter2") || strings.Contains(logs, basicAuth("bot", "hunter2")[6:]) {
					t.Fatalf("the log shows the credentials:\n%s", logs)
				}
			})
		}
	}
}

// TestParentBreaksTheConnection: a parent that closes the connection
// without answering, to a CONNECT or to an absolute-form request, fails on
// its own: the error is the parent's, neutral for the upstream, and its
// breaker counts it.
func TestParentBreaksTheConnection(t *testing.T) {
	for _, target := range []string{"https://127.0.0.1:1/m2/a.jar", "http://127.0.0.1:2/m2/a.jar"} {
		t.Run(target[:strings.Index(target, ":")], func(t *testing.T) {
			parent := testkit.StartParent(t, &testkit.Parent{Decide: func(*http.Request) testkit.ParentAnswer {
				return testkit.ParentAnswer{Drop: true}
			}})
			r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = %q\n[circuit_breaker.overrides.parent]\nfailure_threshold = 1",
				parent.URL), "https://127.0.0.1:1/m2", "http://127.0.0.1:2/m2"))
			_, err := r.get(t, target)
			var pe *ParentError
			if !errors.As(err, &pe) || pe.Fault != FaultUnreachable {
				t.Fatalf("err = %v, want the parent's", err)
			}
			if got := attempt.Decide(nil, err, context.Background()); got != breakerstate.Neutral {
				t.Fatalf("the upstream's verdict %v, want neutral", got)
			}
			if b := r.breaker(t, "parent:"+parent.URL); b.State != breakerstate.Open {
				t.Fatalf("parent breaker %+v, want open after the broken connection", b)
			}
		})
	}
}

// TestClientsBrokenUploadIsNotTheParents: a request whose body the client
// fails to send breaks the round trip, but not because of the parent: its
// breaker counts nothing.
func TestClientsBrokenUploadIsNotTheParents(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the whole upload, before any answer
	}))
	t.Cleanup(up.Close)
	parent := testkit.StartParent(t, &testkit.Parent{})
	r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = %q\n[circuit_breaker.overrides.parent]\nfailure_threshold = 1",
		parent.URL), up.URL+"/m2"))
	broken := io.MultiReader(strings.NewReader("half an upload"), iotest.ErrReader(errors.New("client reset")))
	req, _ := http.NewRequest(http.MethodPut, up.URL+"/m2/a.jar", io.NopCloser(broken))
	req.ContentLength = 1 << 20
	if _, err := r.egress.RoundTrip(req); err == nil || errors.Is(err, attempt.ErrParent) {
		t.Fatalf("err = %v, want the round trip's own error, not the parent's", err)
	}
	if b := r.breaker(t, "parent:"+parent.URL); b.State != breakerstate.Closed || b.FailureCount != 0 {
		t.Fatalf("parent breaker %+v: the client's broken upload counted", b)
	}
}

// TestConfigErrorLoggedOnceAMinute: a 407 on every connection is said once
// a minute, the next line counting the ones left out.
func TestConfigErrorLoggedOnceAMinute(t *testing.T) {
	clock := testkit.NewClock()
	logs := &testkit.SyncBuffer{}
	w := newWarner(zerolog.New(logs), clock.Now)
	err := &ParentError{Key: "parent:http://p:1", Fault: FaultConfig, Status: 407, Err: errors.New("refused")}
	for range 3 {
		w.configError("parent:http://p:1", err)
	}
	clock.Advance(time.Minute)
	w.configError("parent:http://p:1", err)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"suppressed":0`) || !strings.Contains(lines[1], `"suppressed":2`) {
		t.Fatalf("lines:\n%s", logs.String())
	}
}

// TestNoProxyAndPerUpstreamParents: a parent_no_proxy host, and an
// upstream whose [sidecar.parents] entry says direct, are dialled
// directly; an upstream with a parent of its own goes through it; a host
// no upstream owns goes through parent_proxy.
func TestNoProxyAndPerUpstreamParents(t *testing.T) {
	var direct, own, unlisted seen
	upDirect := httptest.NewServer(http.HandlerFunc(direct.handler))
	t.Cleanup(upDirect.Close)
	upOwn := httptest.NewServer(http.HandlerFunc(own.handler))
	t.Cleanup(upOwn.Close)
	upUnlisted := httptest.NewServer(http.HandlerFunc(unlisted.handler))
	t.Cleanup(upUnlisted.Close)
	def := testkit.StartParent(t, &testkit.Parent{})
	other := testkit.StartParent(t, &testkit.Parent{})
	_, unlistedPort, _ := net.SplitHostPort(upUnlisted.Listener.Addr().String())
	r := newRig(t, fmt.Sprintf(`
[registries]
enable = "maven,npm"
[maven]
proxies = [%q]
[npm]
proxy = %q
[sidecar]
parent_proxy = %q
parent_no_proxy = ["localhost:%s"]
allow_hosts = ["localhost:%s"]
[sidecar.parents]
"maven:%s/m2" = "direct"
npm = %q
`, upDirect.URL+"/m2", upOwn.URL, def.URL, unlistedPort, unlistedPort, upDirect.URL, other.URL))
	for _, u := range []string{upDirect.URL + "/m2/a.jar", upOwn.URL + "/left-pad", "http://localhost:" + unlistedPort + "/x"} {
		if resp, err := r.get(t, u); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", u, resp, err)
		}
	}
	if def.Forwards() != 0 || other.Forwards() != 1 {
		t.Fatalf("parent_proxy forwarded %d, npm's parent %d; want 0 and 1", def.Forwards(), other.Forwards())
	}
	// A host nobody owns and parent_no_proxy does not name goes through
	// parent_proxy.
	if got := r.egress.ParentKey(mustURL(t, "http://elsewhere.example/x")); got != "parent:"+def.URL {
		t.Fatalf("ParentKey(unowned host) = %q, want parent_proxy's", got)
	}
	if got := r.egress.ParentKeyOfHost("localhost", unlistedPort); got != "" {
		t.Fatalf("ParentKeyOfHost(parent_no_proxy host) = %q, want direct", got)
	}
	for name, s := range map[string]*seen{"direct": &direct, "npm": &own, "no_proxy": &unlisted} {
		if hits, _ := s.counts(); hits != 1 {
			t.Fatalf("%s upstream saw %d requests", name, hits)
		}
	}
}

// TestBlindTunnelThroughTheParent: DialTunnel opens a CONNECT tunnel
// through the parent, with its credentials, and the bytes pass both ways.
func TestBlindTunnelThroughTheParent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "hello from upstream\n")
		io.Copy(io.Discard, c)
	}()
	auth := basicAuth("bot", "pw")
	parent := testkit.StartParent(t, &testkit.Parent{Auth: auth})
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = \"http://bot:pw@%s\"", parent.Addr), "https://"+ln.Addr().String()+"/m2"))
	conn, err := r.egress.DialTunnel(context.Background(), host, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line := make([]byte, len("hello from upstream\n"))
	if _, err := io.ReadFull(conn, line); err != nil || string(line) != "hello from upstream\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	if parent.Connects() != 1 || parent.Auths()[0] != auth {
		t.Fatalf("the parent tunnelled %d times with %q", parent.Connects(), parent.Auths())
	}
}

// TestHeaderWaitWhileReachingTheParent: a parent that takes the TCP
// connection but never finishes the TLS handshake keeps the attempt
// reaching it; when the header wait runs out meanwhile, the error is the
// parent's, not the upstream's timeout.
func TestHeaderWaitWhileReachingTheParent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // silent: no TLS handshake ever
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = \"https://%s\"\ntls_handshake_timeout = \"30s\"", ln.Addr()),
		"http://127.0.0.1:1/m2"))
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/m2/a.jar", nil)
	_, _, _, err = attempt.RoundTripWithin(r.egress, req, 200*time.Millisecond)
	if !errors.Is(err, attempt.ErrParent) {
		t.Fatalf("err = %v, want the parent's (it was still being reached)", err)
	}
	if got := attempt.Decide(nil, err, context.Background()); got != breakerstate.Neutral {
		t.Fatalf("the upstream's verdict %v, want neutral", got)
	}
}

// TestUnansweredConnectIsTheUpstreamsTime: a parent that takes the CONNECT
// and never answers is waiting on the upstream, so the header wait that
// runs out is the upstream's, and the parent's breaker learns nothing.
func TestUnansweredConnectIsTheUpstreamsTime(t *testing.T) {
	release := make(chan struct{})
	parent := testkit.StartParent(t, &testkit.Parent{Decide: func(r *http.Request) testkit.ParentAnswer {
		<-release
		return testkit.ParentAnswer{Status: http.StatusGatewayTimeout}
	}})
	t.Cleanup(func() { close(release) })
	r := newRig(t, mavenConf(fmt.Sprintf("parent_proxy = %q\n[circuit_breaker.overrides.parent]\nfailure_threshold = 1",
		parent.URL), "https://127.0.0.1:1/m2"))
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:1/m2/a.jar", nil)
	_, _, _, err := attempt.RoundTripWithin(r.egress, req, 200*time.Millisecond)
	if !errors.Is(err, attempt.ErrHeaderTimeout) || errors.Is(err, attempt.ErrParent) {
		t.Fatalf("err = %v, want the upstream's header timeout", err)
	}
	if b := r.breaker(t, "parent:"+parent.URL); b.State != breakerstate.Closed || b.FailureCount != 0 {
		t.Fatalf("parent breaker %+v, want nothing counted", b)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
