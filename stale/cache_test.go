package stale

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStorable(t *testing.T) {
	tests := []struct {
		name          string
		method        string
		status        int
		cacheControl  string
		contentLength int64
		want          bool
	}{
		{"GET 200", http.MethodGet, 200, "", 10, true},
		{"GET 200 chunked", http.MethodGet, 200, "", -1, true},
		{"GET 200 at the bound", http.MethodGet, 200, "", 100, true},
		{"GET 200 over the bound", http.MethodGet, 200, "", 101, false},
		{"HEAD", http.MethodHead, 200, "", 10, false},
		{"POST", http.MethodPost, 200, "", 10, false},
		{"206", http.MethodGet, 206, "", 10, false},
		{"304", http.MethodGet, 304, "", 0, false},
		{"404 is kept: a negative answer", http.MethodGet, 404, "", 10, true},
		{"410 is kept", http.MethodGet, 410, "", 10, true},
		{"404 over the bound", http.MethodGet, 404, "", 101, false},
		{"401 outside the docker ping", http.MethodGet, 401, "", 10, false},
		{"500", http.MethodGet, 500, "", 10, false},
		{"no-store", http.MethodGet, 200, "no-store", 10, false},
		{"No-Store among others", http.MethodGet, 200, "public, max-age=60, No-Store", 10, false},
		{"no-cache is storable", http.MethodGet, 200, "no-cache, max-age=0", 10, true},
		{"no-store-ish token", http.MethodGet, 200, "x-no-store", 10, true},
	}
	c, _ := newTestCache(t, Options{MaxObjectBytes: 100})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "https://r.io/a", nil)
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}, ContentLength: tt.contentLength}
			if tt.cacheControl != "" {
				resp.Header.Set("Cache-Control", tt.cacheControl)
			}
			if got := c.StorableFor(Ref{}, req, resp); got != tt.want {
				t.Errorf("Storable = %v, want %v", got, tt.want)
			}
		})
	}
	if c.StorableFor(Ref{}, nil, nil) {
		t.Error("Storable(nil, nil) = true")
	}
}

// TestStorableForHeadAndPing covers the refs fallback builds for a docker
// manifest HEAD (Head) and for the docker ping (AnyStatus).
func TestStorableForHeadAndPing(t *testing.T) {
	head, ping := Ref{Key: "k", Head: true}, Ref{Key: "k", AnyStatus: true}
	tests := []struct {
		name          string
		ref           Ref
		method        string
		status        int
		contentLength int64
		want          bool
	}{
		{"HEAD 200 for a HEAD ref", head, http.MethodHead, 200, 10, true},
		{"HEAD 200 announcing more than the bound: no body is kept", head, http.MethodHead, 200, 1 << 30, true},
		{"HEAD 404 is not kept", head, http.MethodHead, 404, 0, false},
		{"HEAD 401 for a HEAD ref", head, http.MethodHead, 401, 0, false},
		{"GET for a HEAD ref", head, http.MethodGet, 200, 10, false},
		{"HEAD 401 for a HEAD ping", Ref{Key: "k", Head: true, AnyStatus: true}, http.MethodHead, 401, 0, true},
		{"GET 401 for the ping", ping, http.MethodGet, 401, 10, true},
		{"GET 401 for the ping over the bound", ping, http.MethodGet, 401, 1 << 20, false},
		{"GET 403 for the ping", ping, http.MethodGet, 403, 10, false},
	}
	c, _ := newTestCache(t, Options{MaxObjectBytes: 100})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "https://r.io/v2/", nil)
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}, ContentLength: tt.contentLength}
			if got := c.StorableFor(tt.ref, req, resp); got != tt.want {
				t.Errorf("StorableFor = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReplaceKeepsOneBody(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	store(t, c, "k", "version one")
	store(t, c, "k", "v2")
	if got, ok := lookupBody(t, c, "k"); !ok || got != "v2" {
		t.Fatalf("entry = %q, %v; want v2", got, ok)
	}
	if b, n := c.Stats(); b != diskUsage(t, c.dir) || n != 1 {
		t.Errorf("Stats = %d bytes, %d objects; want %d (on disk), 1", b, n, diskUsage(t, c.dir))
	}
	files := filesIn(t, c.dir)
	if countSuffix(files, bodySuffix) != 1 || countSuffix(files, metaSuffix) != 1 || len(files) != 2 {
		t.Errorf("files %v, want one meta and one body", files)
	}
}

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	bound := roomFor(t, dir, 2)
	c, reg := newTestCache(t, Options{Dir: dir, MaxBytes: bound, MaxObjectBytes: 100})
	body := strings.Repeat("b", 40)
	store(t, c, "a", body)
	store(t, c, "b", body)
	if _, ok := lookupBody(t, c, "a"); !ok { // a is now more recent than b
		t.Fatal("a missing")
	}
	store(t, c, "c", body)

	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := lookupBody(t, c, key); ok != want {
			t.Errorf("%s present = %v, want %v", key, ok, want)
		}
	}
	if b, n := c.Stats(); b != diskUsage(t, c.dir) || n != 2 {
		t.Errorf("Stats = %d, %d; want %d (on disk), 2", b, n, diskUsage(t, c.dir))
	}
	if files := filesIn(t, c.dir); len(files) != 4 {
		t.Errorf("eviction left files %v", files)
	}
	if v := metricValue(t, reg, "nora_sidecar_stale_cache_evictions_total"); v != 1 {
		t.Errorf("evictions = %v, want 1", v)
	}

	// Many more writes never push the total over the bound.
	for i := range 20 {
		store(t, c, fmt.Sprintf("k%d", i), strings.Repeat("x", 10+i))
		if b, _ := c.Stats(); b > bound || diskUsage(t, c.dir) > bound {
			t.Fatalf("after %d writes the cache counts %d bytes and takes %d, over %d", i, b, diskUsage(t, c.dir), bound)
		}
	}
}

func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	c, reg := newTestCache(t, Options{Dir: dir, MaxBytes: roomFor(t, dir, 2), MaxObjectBytes: 10})
	store(t, c, "a", "12345")
	store(t, c, "b", "123")
	store(t, c, "c", "1234") // evicts a
	want := `
# HELP nora_sidecar_stale_cache_bytes Bytes the stale cache takes on disk: allocated blocks of its bodies, metadata and directories, and the writes in flight.
# TYPE nora_sidecar_stale_cache_bytes gauge
nora_sidecar_stale_cache_bytes ` + fmt.Sprint(diskUsage(t, dir)) + `
# HELP nora_sidecar_stale_cache_evictions_total Stale cache entries removed to stay under stale_max_bytes.
# TYPE nora_sidecar_stale_cache_evictions_total counter
nora_sidecar_stale_cache_evictions_total 1
# HELP nora_sidecar_stale_cache_objects Entries held by the stale cache.
# TYPE nora_sidecar_stale_cache_objects gauge
nora_sidecar_stale_cache_objects 2
# HELP nora_sidecar_stale_cache_write_errors_total Stale cache writes or commits that failed, by cause: no_space, not_writable, digest_mismatch, other.
# TYPE nora_sidecar_stale_cache_write_errors_total counter
nora_sidecar_stale_cache_write_errors_total{cause="digest_mismatch"} 0
nora_sidecar_stale_cache_write_errors_total{cause="no_space"} 0
nora_sidecar_stale_cache_write_errors_total{cause="not_writable"} 0
nora_sidecar_stale_cache_write_errors_total{cause="other"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(c.m.objects); n != 2 {
		t.Errorf("objects gauge = %v", n)
	}
}

func TestOpenTwiceOnOneRegistryFails(t *testing.T) {
	c, reg := newTestCache(t, Options{})
	if _, err := Open(Options{Dir: c.dir, Registerer: reg}); err == nil {
		t.Fatal("second Open on the same registry succeeded")
	}
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open without a directory succeeded")
	}
}

// TestConcurrentTeeAndLookup runs 64 goroutines writing and reading a few
// shared keys and some private ones, under a bound small enough to evict.
// Every body read back must be one complete version, never a mix.
func TestConcurrentTeeAndLookup(t *testing.T) {
	c, _ := newTestCache(t, Options{MaxBytes: 64 << 10, MaxObjectBytes: 16 << 10})
	c.syncFile = func(*os.File) error { return nil }
	const workers, rounds = 64, 8
	version := func(key string, w, r int) string {
		// Each version has its own length and content, so a mix shows.
		return strings.Repeat(fmt.Sprintf("[%s w%d r%d]", key, w, r), 1+(w*7+r)%50)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				key := fmt.Sprintf("shared%d", r%3)
				if w%4 == 0 {
					key = fmt.Sprintf("own%d", w)
				}
				body := version(key, w, r)
				cl := int64(len(body))
				if r%2 == 1 {
					cl = -1
				}
				resp := okResponse(strings.NewReader(body), cl)
				tee(c, key, resp)
				if r%5 == 4 { // some clients go away early
					resp.Body.Read(make([]byte, 3))
				} else if got, err := io.ReadAll(resp.Body); err != nil || string(got) != body {
					errs <- fmt.Errorf("client read %d bytes, %v", len(got), err)
				}
				resp.Body.Close()
				if e, ok := lookup(c, key); ok {
					got, err := io.ReadAll(e.Body)
					e.Body.Close()
					if err != nil || int64(len(got)) != e.Size || !oneVersion(string(got), key) {
						errs <- fmt.Errorf("key %s: read back a mixed or torn body (%d bytes, %v)", key, len(got), err)
					}
				}
			}
		})
	}
	wg.Wait()
	c.commits.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	bytes, objects := c.Stats()
	if bytes > 64<<10 {
		t.Errorf("cache holds %d bytes over its bound", bytes)
	}
	files := filesIn(t, c.dir)
	if countSuffix(files, tmpSuffix) != 0 || countSuffix(files, metaSuffix) != objects || countSuffix(files, bodySuffix) != objects {
		t.Errorf("disk has %d files (%d tmp, %d meta, %d body) for %d objects",
			len(files), countSuffix(files, tmpSuffix), countSuffix(files, metaSuffix), countSuffix(files, bodySuffix), objects)
	}
}

// oneVersion reports whether body is a whole number of repeats of a single
// "[key wN rM]" unit, as written by one Tee.
func oneVersion(body, key string) bool {
	end := strings.IndexByte(body, ']')
	if end < 0 || !strings.HasPrefix(body, "["+key+" w") {
		return false
	}
	unit := body[:end+1]
	return len(body)%len(unit) == 0 && strings.Repeat(unit, len(body)/len(unit)) == body
}

func BenchmarkLookupHit(b *testing.B) {
	c, _ := newTestCache(b, Options{})
	store(b, c, "https://registry.npmjs.org/lodash", strings.Repeat("{}", 512))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e, ok := lookup(c, "https://registry.npmjs.org/lodash")
		if !ok {
			b.Fatal("miss")
		}
		e.Body.Close()
	}
}

// TestHasIsFindWithoutTheUse: Has says what Find would, and leaves the LRU
// order alone (a cache of two keeps "b" after Has("a"), as if never asked).
func TestHasIsFindWithoutTheUse(t *testing.T) {
	dir := t.TempDir()
	c, _ := newTestCache(t, Options{Dir: dir, MaxBytes: roomFor(t, dir, 2), MaxObjectBytes: 100})
	body := strings.Repeat("b", 40)
	store(t, c, "a", body)
	store(t, c, "b", body)
	if !c.Has(Ref{Key: "a", Mode: modeIsolate}) || c.Has(Ref{Key: "nothing", Mode: modeIsolate}) {
		t.Fatal("Has disagrees with what is stored")
	}
	store(t, c, "c", body) // evicts the least recently used: a, untouched by Has
	if _, ok := lookupBody(t, c, "a"); ok {
		t.Fatal("Has marked a as used")
	}
}
