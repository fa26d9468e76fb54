package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock = testkit.Clock

func newFakeClock() *fakeClock {
	return testkit.NewClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// realmServer is a fake token realm that counts its hits and remembers the
// last request's query and credentials.
type realmServer struct {
	srv    *httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	status int
	answer map[string]any
	last   *http.Request
	gate   func() // runs in the handler before answering, when set
}

func newRealmServer(t *testing.T) *realmServer {
	t.Helper()
	rs := &realmServer{status: http.StatusOK, answer: map[string]any{"expires_in": 300}}
	rs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rs.hits.Add(1)
		rs.mu.Lock()
		rs.last = r.Clone(context.Background())
		status, gate := rs.status, rs.gate
		ans := map[string]any{"token": fmt.Sprintf("tok-%d", n)}
		for k, v := range rs.answer {
			ans[k] = v
		}
		rs.mu.Unlock()
		if gate != nil {
			gate()
		}
		if status != http.StatusOK {
			http.Error(w, "boom", status)
			return
		}
		if _, ok := ans["access_token"]; ok {
			delete(ans, "token")
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(rs.srv.Close)
	return rs
}

func (rs *realmServer) set(status int, answer map[string]any) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.status, rs.answer = status, answer
}

func (rs *realmServer) lastRequest() *http.Request {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.last
}

func (rs *realmServer) challenge(scopes ...string) Challenge {
	return Challenge{Scheme: "bearer", Realm: rs.srv.URL + "/token", Service: "reg.test", Scopes: scopes}
}

func mustToken(t *testing.T, ts *TokenSource, key, auth string, ch Challenge) string {
	t.Helper()
	tok, err := ts.Token(context.Background(), nil, key, auth, ch, "")
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

func TestTokenCachedPerScope(t *testing.T) {
	rs := newRealmServer(t)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	a, b := rs.challenge("repository:a:pull"), rs.challenge("repository:b:pull")

	steps := []struct {
		ch       Challenge
		want     string
		wantHits int64
	}{
		{a, "tok-1", 1},
		{a, "tok-1", 1},
		{b, "tok-2", 2},
		{a, "tok-1", 2},
		{b, "tok-2", 2},
	}
	for i, s := range steps {
		if got := mustToken(t, ts, "docker-b", "", s.ch); got != s.want {
			t.Errorf("step %d: token %q, want %q", i, got, s.want)
		}
		if h := rs.hits.Load(); h != s.wantHits {
			t.Errorf("step %d: realm hits %d, want %d", i, h, s.wantHits)
		}
	}
}

func TestTokenRequestQuery(t *testing.T) {
	rs := newRealmServer(t)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ch := rs.challenge("repository:a:pull", "repository:b:pull,push")
	ch.Realm += "?keep=1"
	mustToken(t, ts, "docker-b", "", ch)
	q := rs.lastRequest().URL.Query()
	if got := q["scope"]; strings.Join(got, "|") != "repository:a:pull|repository:b:pull,push" {
		t.Errorf("scope params %q", got)
	}
	if q.Get("service") != "reg.test" || q.Get("keep") != "1" {
		t.Errorf("query %v: want service=reg.test and the realm's own keep=1", q)
	}
}

func TestTokenExpiry(t *testing.T) {
	tests := []struct {
		name      string
		answer    map[string]any
		stillGood time.Duration // cached at this age
		expired   time.Duration // refetched at this age
	}{
		{"expires_in 300 minus 30s margin", map[string]any{"expires_in": 300}, 269 * time.Second, 271 * time.Second},
		{"absent means 60s minus 6s margin", map[string]any{}, 53 * time.Second, 55 * time.Second},
		{"zero means 60s", map[string]any{"expires_in": 0}, 53 * time.Second, 55 * time.Second},
		{"huge is capped at a day", map[string]any{"expires_in": int64(1) << 62}, 23 * time.Hour, 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := newRealmServer(t)
			rs.set(http.StatusOK, tt.answer)
			clock := newFakeClock()
			ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: clock.Now})
			ch := rs.challenge("repository:a:pull")
			start := clock.Now()
			mustToken(t, ts, "k", "", ch)
			clock.Advance(tt.stillGood)
			if got := mustToken(t, ts, "k", "", ch); got != "tok-1" || rs.hits.Load() != 1 {
				t.Fatalf("at %v: token %q after %d hits, want cached tok-1", clock.Now().Sub(start), got, rs.hits.Load())
			}
			clock.Advance(tt.expired - tt.stillGood)
			if got := mustToken(t, ts, "k", "", ch); got != "tok-2" || rs.hits.Load() != 2 {
				t.Fatalf("at %v: token %q after %d hits, want refetched tok-2", clock.Now().Sub(start), got, rs.hits.Load())
			}
		})
	}
}

func TestTokenAccessTokenField(t *testing.T) {
	rs := newRealmServer(t)
	rs.set(http.StatusOK, map[string]any{"access_token": "oauth-style"})
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	if got := mustToken(t, ts, "k", "", rs.challenge()); got != "oauth-style" {
		t.Errorf("token %q, want oauth-style", got)
	}
}

func TestTokenEmptyAnswerIsError(t *testing.T) {
	rs := newRealmServer(t)
	rs.set(http.StatusOK, map[string]any{"token": ""})
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	if _, err := ts.Token(context.Background(), nil, "k", "", rs.challenge(), ""); err == nil {
		t.Fatal("answer without a token was accepted")
	}
}

func TestTokenBasicCredentials(t *testing.T) {
	tests := []struct {
		name, auth, wantUser, wantPass string
		wantBasic                      bool
	}{
		{"no credentials configured", "", "", "", false},
		{"user and password", "robot:s3cr:et", "robot", "s3cr:et", true},
		{"user only", "robot", "robot", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := newRealmServer(t)
			ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
			mustToken(t, ts, "k", tt.auth, rs.challenge("repository:a:pull"))
			r := rs.lastRequest()
			user, pass, ok := r.BasicAuth()
			if ok != tt.wantBasic || user != tt.wantUser || pass != tt.wantPass {
				t.Errorf("basic auth = (%q, %q, %v), want (%q, %q, %v)", user, pass, ok, tt.wantUser, tt.wantPass, tt.wantBasic)
			}
			if !tt.wantBasic && r.Header.Get("Authorization") != "" {
				t.Errorf("Authorization sent without configured credentials")
			}
		})
	}
}

func TestTokenDifferentCredentialsDoNotShare(t *testing.T) {
	rs := newRealmServer(t)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ch := rs.challenge("repository:a:pull")
	anon := mustToken(t, ts, "k", "", ch)
	authed := mustToken(t, ts, "k", "u:p", ch)
	if anon == authed || rs.hits.Load() != 2 {
		t.Errorf("anonymous %q and authenticated %q tokens shared (%d hits)", anon, authed, rs.hits.Load())
	}
}

// failTransport fails the test if any request reaches it.
type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("unexpected network call to %s", r.URL.Host)
	return nil, errors.New("no network in this test")
}

func TestTokenBadRealm(t *testing.T) {
	realms := []string{
		"ftp://auth.test/token",
		"file:///etc/passwd",
		"gopher://auth.test/",
		"http://169.254.169.254/latest/meta-data/",
		"https://169.254.0.1:8443/token",
		"http://[fe80::1]/token",
		"http://[fe80::1%25eth0]/token",
		"http://[fd00:ec2::254]/token",
		"http://[::ffff:169.254.169.254]/token",
		"http://0.0.0.0/token",
		"http://[::]/token",
		"http://169.254.169.254./token",
		"http://[fd00:ec2::254%25eth0]/token",
		"http://[fd20:ce::254]/token",
		"http://100.100.100.200/token",
		"http://[::a9fe:a9fe]/token",
		"http://[64:ff9b::a9fe:a9fe]/token",
		"http://0xa9fea9fe/token",
		"/relative/token",
		"http:///no-host",
		"http://%zz/",
	}
	ts := NewTokenSource(TokenOptions{Client: &http.Client{Transport: failTransport{t}}, Now: newFakeClock().Now})
	for _, realm := range realms {
		t.Run(realm, func(t *testing.T) {
			_, err := ts.Token(context.Background(), nil, "k", "u:p", Challenge{Scheme: "bearer", Realm: realm}, "")
			if !errors.Is(err, errBadRealm) {
				t.Errorf("err = %v, want errBadRealm", err)
			}
		})
	}
}

func TestTokenRedirectToLinkLocalRefused(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://169.254.169.254/latest/meta-data/", http.StatusFound))
	t.Cleanup(srv.Close)
	ts := NewTokenSource(TokenOptions{Client: srv.Client(), Now: newFakeClock().Now})
	_, err := ts.Token(context.Background(), nil, "k", "", Challenge{Scheme: "bearer", Realm: srv.URL + "/token"}, "")
	if !errors.Is(err, errBadRealm) {
		t.Errorf("err = %v, want errBadRealm", err)
	}
}

func TestTokenConcurrentMissesShareOneFetch(t *testing.T) {
	const callers = 100
	rs := newRealmServer(t)
	var arrived sync.WaitGroup
	arrived.Add(callers)
	// Hold the single fetch until every caller is about to ask, so without
	// singleflight they would all miss the cache and fetch themselves.
	rs.gate = arrived.Wait
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ch := rs.challenge("repository:a:pull")

	var wg sync.WaitGroup
	tokens := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			arrived.Done()
			tokens[i], errs[i] = ts.Token(context.Background(), nil, "k", "", ch, "")
		})
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || tokens[i] != "tok-1" {
			t.Fatalf("caller %d: (%q, %v), want tok-1", i, tokens[i], errs[i])
		}
	}
	if h := rs.hits.Load(); h != 1 {
		t.Errorf("realm hits %d, want 1", h)
	}
}

func TestTokenErrorsAreNotCached(t *testing.T) {
	rs := newRealmServer(t)
	rs.set(http.StatusInternalServerError, nil)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ch := rs.challenge("repository:a:pull")
	_, err := ts.Token(context.Background(), nil, "k", "", ch, "")
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err = %v, want an error naming status 500", err)
	}
	rs.set(http.StatusOK, nil)
	if got := mustToken(t, ts, "k", "", ch); got != "tok-2" || rs.hits.Load() != 2 {
		t.Errorf("after recovery: token %q with %d hits, want tok-2 with 2", got, rs.hits.Load())
	}
}

func TestTokenInvalidate(t *testing.T) {
	rs := newRealmServer(t)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ch := rs.challenge("repository:a:pull", "repository:b:pull")
	mustToken(t, ts, "k", "u:p", ch)
	// Scope order does not matter for the cache key.
	ts.Invalidate("k", rs.challenge("repository:b:pull", "repository:a:pull"))
	if got := mustToken(t, ts, "k", "u:p", ch); got != "tok-2" {
		t.Errorf("after Invalidate: token %q, want a fresh tok-2", got)
	}
}

func TestTokenCacheIsBounded(t *testing.T) {
	rs := newRealmServer(t)
	clock := newFakeClock()
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: clock.Now, MaxEntries: 2})
	for i := range 5 {
		mustToken(t, ts, "k", "", rs.challenge(fmt.Sprintf("repository:%d:pull", i)))
		clock.Advance(time.Second)
	}
	ts.mu.Lock()
	n := len(ts.cache)
	ts.mu.Unlock()
	if n != 2 {
		t.Fatalf("cache holds %d entries, want 2", n)
	}
	// The newest entry survives; the oldest was evicted.
	mustToken(t, ts, "k", "", rs.challenge("repository:4:pull"))
	mustToken(t, ts, "k", "", rs.challenge("repository:0:pull"))
	if h := rs.hits.Load(); h != 6 {
		t.Errorf("realm hits %d, want 6 (newest cached, oldest refetched)", h)
	}
}

func TestTokenCanceledCaller(t *testing.T) {
	rs := newRealmServer(t)
	ts := NewTokenSource(TokenOptions{Client: rs.srv.Client(), Now: newFakeClock().Now})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ts.Token(ctx, nil, "k", "", rs.challenge(), ""); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if h := rs.hits.Load(); h != 0 {
		t.Errorf("realm hits %d for a canceled caller, want 0", h)
	}
}
