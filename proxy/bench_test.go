package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// BenchmarkStripHopByHop includes cloning a typical request's headers, since
// stripping works in place.
func BenchmarkStripHopByHop(b *testing.B) {
	base := http.Header{
		"User-Agent": {"Apache-Maven/3.9.9"}, "Accept": {"*/*"}, "Accept-Encoding": {"gzip"},
		"Connection": {"keep-alive"}, "Proxy-Connection": {"keep-alive"}, "Authorization": {"Basic eA=="},
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		h := base.Clone()
		stripRequestHopByHop(h)
		addVia(h)
	}
}

func BenchmarkRequestLogLine(b *testing.B) {
	cfg := testkit.LoadConfig(b, "[registries]\nenable = \"maven\"\n[maven]\nproxies = [\"https://repo.example.com/maven2\"]\n", nil)
	p, err := New(cfg, Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.New(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://repo.example.com/maven2/org/x/1/x-1.jar?sig=abc&q=1", nil)
	m := p.state.Load().routes.Of(req.URL)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := p.newRecord(req)
		rec.route, rec.result, rec.status = m, "forwarded", 200
		rec.attempts = fallback.Attempts{{Key: m.Key, Status: 200}}
		p.emit(rec, 4096)
	}
}

// ixBenchProxy serves one healthy maven upstream; the client keeps enough
// idle connections for RunParallel.
func ixBenchProxy(b *testing.B) (*testProxy, *upstream, *http.Client) {
	up := newUpstream(b, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("artifact bytes")) })
	tp := ixServe(b, ixMaven(up.URL, true, ""), zerolog.New(io.Discard).Level(zerolog.InfoLevel))
	tr := &http.Transport{Proxy: http.ProxyURL(tp.URL), MaxIdleConnsPerHost: 256, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return tp, up, &http.Client{Transport: tr}
}

func ixBenchGet(b *testing.B, c *http.Client, target string, want int) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(target)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				b.Errorf("status %d, want %d", resp.StatusCode, want)
				return
			}
		}
	})
}

// BenchmarkProxyClosedPath: a healthy upstream through the real proxy.
func BenchmarkProxyClosedPath(b *testing.B) {
	_, up, c := ixBenchProxy(b)
	ixBenchGet(b, c, up.URL+"/maven2/g/a/1/a-1.jar", http.StatusOK)
}

// BenchmarkProxyClosedPathDistinct: BenchmarkProxyClosedPath with a URL
// of its own for every request, so that no two share a fetch
// (docs/behaviour.md §5.9) and each pays the whole forward path.
func BenchmarkProxyClosedPathDistinct(b *testing.B) {
	_, up, c := ixBenchProxy(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(fmt.Sprintf("%s/maven2/g/a/1/a-1.jar?i=%d", up.URL, n.Add(1)))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkProxyFastFail: the breaker is open and the proxy answers 503
// itself; the upstream must never be asked.
func BenchmarkProxyFastFail(b *testing.B) {
	tp, up, c := ixBenchProxy(b)
	if err := tp.Breakers().Force(ixKey(up.URL), breakerstate.ModeOpen); err != nil {
		b.Fatal(err)
	}
	ixBenchGet(b, c, up.URL+"/maven2/g/a/1/a-1.jar", http.StatusServiceUnavailable)
	if up.hits.Load() != 0 {
		b.Fatalf("open breaker let %d requests through", up.hits.Load())
	}
}

// BenchmarkProxyLargeBody: one client at a time fetching a 16 MiB body (a
// jar, a wheel, a layer) through the proxy, each under a URL of its own;
// b.SetBytes makes it a throughput figure. With stale_dir set, every body
// is also written to the stale cache.
func BenchmarkProxyLargeBody(b *testing.B) {
	const size = 16 << 20
	chunk := make([]byte, 256<<10)
	up := newUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for left := size; left > 0; left -= len(chunk) {
			w.Write(chunk[:min(left, len(chunk))])
		}
	})
	for _, stale := range []bool{false, true} {
		b.Run(fmt.Sprintf("stale=%v", stale), func(b *testing.B) {
			extra := ""
			if stale {
				extra = fmt.Sprintf("[sidecar]\nstale_dir = %q\nstale_max_bytes = \"256MiB\"\n", b.TempDir())
			}
			tp := ixServe(b, ixMaven(up.URL, true, extra), zerolog.New(io.Discard).Level(zerolog.InfoLevel))
			tr := &http.Transport{Proxy: http.ProxyURL(tp.URL), DisableCompression: true}
			b.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}
			buf := make([]byte, 256<<10)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := c.Get(fmt.Sprintf("%s/maven2/g/a/1/a-1.jar?i=%d", up.URL, i))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, buf)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		})
	}
}
