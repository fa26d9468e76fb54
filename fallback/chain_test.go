package fallback

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/fallback/format/docker"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// chainRig is a Chain over two upstreams of one format on loopback: A
// (addressed, which fails the test unless a case scripts it) and B (its
// only candidate), B served by handler.
type chainRig struct {
	*rig
	chain *Chain
	a, b  *config.Upstream
	aUp   *testkit.Upstream
	bUp   *testkit.Upstream
}

func newChainRig(t *testing.T, formatName string, handler http.HandlerFunc) *chainRig {
	t.Helper()
	cr := &chainRig{}
	cr.aUp = testkit.NewUpstream(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("A was asked for %s but should not have been", r.URL.Path)
		http.Error(w, "not expected", http.StatusTeapot)
	})
	cr.bUp = testkit.NewUpstream(handler)
	cr.a = testkit.ConfigUpstream(t, formatName, cr.aUp.Start(t).URL+"/repo")
	cr.b = testkit.ConfigUpstream(t, formatName, cr.bUp.Start(t).URL+"/mirror")
	cr.rig = newRig(t, cr.a.Key, cr.b.Key)
	var err error
	cr.chain, err = New(Options{Breakers: cr.set, Sender: cr.sender, Now: cr.clock.Now, Registerer: cr.reg,
		Logger: zerolog.Nop(), Formats: format.Set{"maven": format.Plain{FinalNotFound: true},
			"docker": docker.New(docker.Options{Now: cr.clock.Now, Breakers: cr.set})}})
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// serveA makes A answer with h.
func (cr *chainRig) serveA(h http.HandlerFunc) { cr.aUp.Script(h) }

func (cr *chainRig) request(method, rel string) Request {
	req := httptest.NewRequest(method, cr.a.URL.String()+rel, nil)
	req.RequestURI = ""
	return Request{Client: req, Addressed: cr.a, Rel: rel, Candidates: []*config.Upstream{cr.b},
		Settings: Settings{Transport: cr.tr}}
}

func TestChainRejected(t *testing.T) {
	tests := []struct {
		name       string
		format     string
		method     string
		bStatus    int
		wantStatus int
		wantKind   answer.Result
		wantBHits  int
	}{
		{"B serves", "maven", http.MethodGet, 200, 200, answer.Fallback, 1},
		{"B serves HEAD", "maven", http.MethodHead, 200, 200, answer.Fallback, 1},
		{"B redirects", "maven", http.MethodGet, 302, 302, answer.Fallback, 1},
		{"POST is never substituted", "maven", http.MethodPost, 200, 503, answer.Synthesized503, 0},
		{"maven B 404 is the truth", "maven", http.MethodGet, 404, 404, answer.Synthesized404, 1},
		{"docker B 410 is the truth", "docker", http.MethodGet, 410, 404, answer.Synthesized404, 1},
		{"pypi B 404 proves nothing", "pypi", http.MethodGet, 404, 503, answer.Synthesized503, 1},
		{"B 403 moves on", "maven", http.MethodGet, 403, 503, answer.Synthesized503, 1},
		{"B failing", "maven", http.MethodGet, 500, 503, answer.Synthesized503, 1},
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
			res := cr.chain.Serve(cr.request(tc.method, "/g/a.jar"))
			defer res.Resp.Body.Close()
			if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind || cr.bUp.Hits() != int64(tc.wantBHits) {
				t.Fatalf("got %d %s (B hits %d), want %d %s (%d)", res.Resp.StatusCode, res.Kind, cr.bUp.Hits(),
					tc.wantStatus, tc.wantKind, tc.wantBHits)
			}
			if tc.wantKind != answer.Fallback {
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
	res := cr.chain.Serve(cr.request(http.MethodGet, "/g/a.jar"))
	res.Resp.Body.Close()
	want := Attempts{{Key: cr.a.Key, Skipped: SkipBreaker}, {Key: cr.b.Key, Skipped: SkipBreaker}}
	if res.Resp.StatusCode != 503 || res.Resp.Header.Get("Retry-After") != "20" || !slices.Equal(res.Attempts, want) {
		t.Fatalf("got %d Retry-After %q attempts %+v", res.Resp.StatusCode, res.Resp.Header.Get("Retry-After"), res.Attempts)
	}
}

// TestChainFailed: A was asked and failed (a 5xx, a broken connection, no
// headers in time) before anything reached the client.
func TestChainFailed(t *testing.T) {
	broken := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-From", "A")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "A is broken")
	}
	hangUp := func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	silent := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	tests := []struct {
		name       string
		bStatus    int // 0: no candidates
		a          http.HandlerFunc
		wantStatus int
		wantKind   answer.Result
		wantBody   string
	}{
		{"candidate serves", 200, broken, 200, answer.Fallback, "from B"},
		{"A's own 5xx replayed", 0, broken, 502, answer.Forwarded, "A is broken"},
		{"A's 5xx beats B's 500", 500, broken, 502, answer.Forwarded, "A is broken"},
		{"maven B 404", 404, broken, 404, answer.Synthesized404, ""},
		{"connection error", 0, hangUp, 502, answer.Error, ""},
		{"header timeout", 0, silent, 504, answer.Error, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cr := newChainRig(t, "maven", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.bStatus)
				io.WriteString(w, "from B")
			})
			cr.a.ProxyTimeout = 100 * time.Millisecond
			cr.serveA(tc.a)
			r := cr.request(http.MethodGet, "/g/a.jar")
			if tc.bStatus == 0 {
				r.Candidates = nil
			}
			res := cr.chain.Serve(r)
			body, _ := io.ReadAll(res.Resp.Body)
			res.Resp.Body.Close()
			if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind {
				t.Fatalf("got %d %s, want %d %s", res.Resp.StatusCode, res.Kind, tc.wantStatus, tc.wantKind)
			}
			if tc.wantBody != "" && string(body) != tc.wantBody {
				t.Errorf("body %q, want %q", body, tc.wantBody)
			}
			if tc.wantKind == answer.Forwarded && res.Resp.Header.Get("X-From") != "A" {
				t.Errorf("A's headers lost: %v", res.Resp.Header)
			}
			wantAttempts := 1
			if tc.bStatus != 0 {
				wantAttempts = 2
			}
			if len(res.Attempts) != wantAttempts {
				t.Errorf("attempts %+v, want %d", res.Attempts, wantAttempts)
			}
		})
	}
}
