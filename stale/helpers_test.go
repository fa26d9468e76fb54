package stale

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// clock is the injected, settable time source.

// newTestCache opens a cache in a fresh directory (unless o.Dir is set) with
// its own registry and the given clock, closed at cleanup.
func newTestCache(t testing.TB, o Options) (*Cache, *prometheus.Registry) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	if o.Now == nil {
		o.Now = testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)).Now
	}
	if o.RefreshAfter == 0 {
		// Most tests check what a replacement does; the refresh interval
		// has its own tests.
		o.RefreshAfter = -1
	}
	c, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, reg
}

// okResponse is a 200 answer with body and the given Content-Length.
func okResponse(body io.Reader, contentLength int64) *http.Response {
	return &http.Response{
		StatusCode:    http.StatusOK,
		Header:        http.Header{"Content-Type": {"application/octet-stream"}},
		Body:          io.NopCloser(body),
		ContentLength: contentLength,
	}
}

// store tees a complete body through the cache the way the proxy does and
// waits for the background commit.
func store(t testing.TB, c *Cache, key, body string) {
	t.Helper()
	resp := okResponse(strings.NewReader(body), int64(len(body)))
	tee(c, key, resp)
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != body {
		t.Fatalf("client read %q, %v; want %q", got, err, body)
	}
	resp.Body.Close()
	c.commits.Wait()
}

// lookupBody returns the stored body of key, or ok=false.
func lookupBody(t testing.TB, c *Cache, key string) (string, bool) {
	t.Helper()
	e, ok := lookup(c, key)
	if !ok {
		return "", false
	}
	defer e.Body.Close()
	b, err := io.ReadAll(e.Body)
	if err != nil {
		t.Fatalf("read stored body: %v", err)
	}
	if int64(len(b)) != e.Size {
		t.Fatalf("stored body is %d bytes, entry says %d", len(b), e.Size)
	}
	return string(b), true
}

// filesIn lists every file under dir (relative paths), for checking that
// nothing was left behind.
func filesIn(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

// countSuffix counts files with the given suffix.
func countSuffix(files []string, suffix string) int {
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, suffix) {
			n++
		}
	}
	return n
}

// metricValue reads a series from reg by name, the sum of its labelled
// series if it has labels, so tests also check the names the dashboards
// rely on.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += valueOf(m)
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func valueOf(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

// errReader returns data, then err.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

var errBroken = errors.New("connection reset")

// lookup is Find for a request without credentials.
func lookup(c *Cache, key string) (*Entry, bool) { return c.Find(Ref{Key: key, Mode: modeIsolate}) }

// tee is Store for a request without credentials.
func tee(c *Cache, key string, resp *http.Response) { c.Store(Ref{Key: key, Mode: modeIsolate}, resp) }

// forMode is Policy{Mode: mode}.For(req, format).
func forMode(req *http.Request, format, mode string) (Ref, bool) {
	return Policy{Mode: mode}.For(req, format)
}

// keyFor is For's key alone.
func keyFor(req *http.Request, format, mode string) (key string, ok bool) {
	ref, ok := forMode(req, format, mode)
	return ref.Key, ok
}
