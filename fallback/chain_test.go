package fallback

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
)

// chainRig is a Chain over two upstreams of one format: A (addressed) and B
// (its only candidate), B served by handler.
type chainRig struct {
	*rig
	chain *Chain
	a, b  *config.Upstream
	bHits atomic.Int64
}

func newChainRig(t *testing.T, format string, handler http.HandlerFunc) *chainRig {
	t.Helper()
	cr := &chainRig{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		cr.bHits.Add(1)
		handler(w, r)
	})
	cr.a = testUpstream(t, format, "http://a.test/repo")
	cr.b = testUpstream(t, format, srv.URL+"/mirror")
	cr.rig = newRig(t, nil, cr.a.Key, cr.b.Key)
	var err error
	cr.chain, err = New(Options{Breakers: cr.set, Sender: cr.sender, Now: cr.clock.Now, Registerer: cr.reg,
		Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func (cr *chainRig) request(method, rel string) Request {
	req := httptest.NewRequest(method, "http://a.test/repo"+rel, nil)
	req.RequestURI = ""
	return Request{Client: req, Addressed: cr.a, Rel: rel, Candidates: []*config.Upstream{cr.b}}
}

func TestChainRejected(t *testing.T) {
	tests := []struct {
		name       string
		format     string
		method     string
		bStatus    int
		wantStatus int
		wantKind   string
		wantBHits  int
	}{
		{"B serves", "maven", http.MethodGet, 200, 200, KindFallback, 1},
		{"B serves HEAD", "maven", http.MethodHead, 200, 200, KindFallback, 1},
		{"B redirects", "maven", http.MethodGet, 302, 302, KindFallback, 1},
		{"POST is never substituted", "maven", http.MethodPost, 200, 503, KindSynthesized503, 0},
		{"maven B 404 is the truth", "maven", http.MethodGet, 404, 404, KindSynthesized404, 1},
		{"docker B 410 is the truth", "docker", http.MethodGet, 410, 404, KindSynthesized404, 1},
		{"pypi B 404 proves nothing", "pypi", http.MethodGet, 404, 503, KindSynthesized503, 1},
		{"B 403 moves on", "maven", http.MethodGet, 403, 503, KindSynthesized503, 1},
		{"B failing", "maven", http.MethodGet, 500, 503, KindSynthesized503, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cr := newChainRig(t, tc.format, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/mirror/g/a.jar" {
					t.Errorf("B asked for %q", r.URL.Path)
				}
				if tc.bStatus == 302 {
					w.Header().Set("Location", "/elsewhere/a.jar")
				}
				w.WriteHeader(tc.bStatus)
				io.WriteString(w, "from B")
			})
			if err := cr.set.Force(cr.a.Key, breakerstate.ModeOpen); err != nil {
				t.Fatal(err)
			}
			res := cr.chain.Rejected(cr.request(tc.method, "/g/a.jar"))
			defer res.Resp.Body.Close()
			if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind || cr.bHits.Load() != int64(tc.wantBHits) {
				t.Fatalf("got %d %s (B hits %d), want %d %s (%d)", res.Resp.StatusCode, res.Kind, cr.bHits.Load(),
					tc.wantStatus, tc.wantKind, tc.wantBHits)
			}
			if tc.wantKind != KindFallback {
				if res.Resp.Header.Get("X-Nora-Breaker-Key") != cr.a.Key {
					t.Errorf("X-Nora-Breaker-Key %q", res.Resp.Header.Get("X-Nora-Breaker-Key"))
				}
				return
			}
			if res.ServedBy != cr.b.Key || res.Resp.Header.Get("X-Nora-Upstream") != cr.b.Key {
				t.Errorf("served by %q / %q", res.ServedBy, res.Resp.Header.Get("X-Nora-Upstream"))
			}
			if tc.bStatus == 302 {
				if loc := res.Resp.Header.Get("Location"); loc != cr.b.URL.Scheme+"://"+cr.b.URL.Host+"/elsewhere/a.jar" {
					t.Errorf("Location %q not made absolute against B", loc)
				}
			}
		})
	}
}

// TestChainRetryAfterIsSmallestOpenTime: A is forced open (30 s), B opened by
// failures 10 s ago (20 s left): the 503 says 20.
func TestChainRetryAfterIsSmallestOpenTime(t *testing.T) {
	cr := newChainRig(t, "maven", func(w http.ResponseWriter, _ *http.Request) {
		t.Error("B is open and must not be asked")
	})
	if err := cr.set.Force(cr.a.Key, breakerstate.ModeOpen); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cr.admit(t, cr.b.Key).Done(breakerstate.Failure)
	}
	cr.clock.Advance(10 * time.Second)
	res := cr.chain.Rejected(cr.request(http.MethodGet, "/g/a.jar"))
	res.Resp.Body.Close()
	if res.Resp.StatusCode != 503 || res.Resp.Header.Get("Retry-After") != "20" || res.Attempts != 0 {
		t.Fatalf("got %d Retry-After %q attempts %d", res.Resp.StatusCode, res.Resp.Header.Get("Retry-After"), res.Attempts)
	}
}

func TestChainFailed(t *testing.T) {
	primary := func() *http.Response {
		return &http.Response{StatusCode: 502, Status: "502 Bad Gateway", Header: http.Header{"X-From": {"A"}},
			Body: newStringBody("A is broken"), ContentLength: 11}
	}
	tests := []struct {
		name       string
		bStatus    int // 0: no candidates
		primary    *http.Response
		cause      error
		wantStatus int
		wantKind   string
		wantBody   string
	}{
		{"candidate serves", 200, primary(), nil, 200, KindFallback, "from B"},
		{"A's own 5xx replayed", 0, primary(), nil, 502, KindForwarded, "A is broken"},
		{"A's 5xx beats B's 500", 500, primary(), nil, 502, KindForwarded, "A is broken"},
		{"maven B 404", 404, primary(), nil, 404, KindSynthesized404, ""},
		{"dial error", 0, nil, errors.New("upstream a: dial refused"), 502, KindError, ""},
		{"header timeout", 0, nil, ErrHeaderTimeout, 504, KindError, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cr := newChainRig(t, "maven", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.bStatus)
				io.WriteString(w, "from B")
			})
			r := cr.request(http.MethodGet, "/g/a.jar")
			if tc.bStatus == 0 {
				r.Candidates = nil
			}
			res := cr.chain.Failed(r, tc.primary, tc.cause)
			body, _ := io.ReadAll(res.Resp.Body)
			res.Resp.Body.Close()
			if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind {
				t.Fatalf("got %d %s, want %d %s", res.Resp.StatusCode, res.Kind, tc.wantStatus, tc.wantKind)
			}
			if tc.wantBody != "" && string(body) != tc.wantBody {
				t.Errorf("body %q, want %q", body, tc.wantBody)
			}
			if tc.primary != nil && tc.wantKind == KindForwarded && res.Resp.Header.Get("X-From") != "A" {
				t.Errorf("A's headers lost: %v", res.Resp.Header)
			}
			wantAttempts := 1
			if tc.bStatus != 0 {
				wantAttempts = 2
			}
			if res.Attempts != wantAttempts {
				t.Errorf("attempts %d, want %d", res.Attempts, wantAttempts)
			}
		})
	}
}
