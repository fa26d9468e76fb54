package stale

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTeeCommitsCompleteBodies(t *testing.T) {
	tests := []struct {
		name          string
		body          string
		contentLength int64
	}{
		{"known length", "hello, world", 12},
		{"unknown length (chunked)", "chunked body", -1},
		{"empty body", "", 0},
		{"larger than the write buffer", strings.Repeat("x", 3*teeBufferSize+7), 3*teeBufferSize + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCache(t, Options{})
			resp := okResponse(strings.NewReader(tt.body), tt.contentLength)
			resp.Header.Set("Docker-Content-Digest", "sha256:ab")
			tee(c, "k", resp)
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != tt.body {
				t.Fatalf("client read %d bytes, %v", len(got), err)
			}
			resp.Body.Close()
			c.commits.Wait()

			e, ok := lookup(c, "k")
			if !ok {
				t.Fatal("complete body was not stored")
			}
			defer e.Body.Close()
			stored, _ := io.ReadAll(e.Body)
			if string(stored) != tt.body || e.Size != int64(len(tt.body)) || e.Status != http.StatusOK {
				t.Errorf("stored %d bytes (size %d, status %d), want %d", len(stored), e.Size, e.Status, len(tt.body))
			}
			if e.Header.Get("Docker-Content-Digest") != "sha256:ab" {
				t.Errorf("stored headers %v lost Docker-Content-Digest", e.Header)
			}
			if files := filesIn(t, c.dir); countSuffix(files, tmpSuffix) != 0 || len(files) != 2 {
				t.Errorf("files after commit: %v", files)
			}
		})
	}
}

func TestTeeNeverStoresIncompleteBodies(t *testing.T) {
	tests := []struct {
		name string
		// run streams resp.Body the way a failing request would.
		run           func(t *testing.T, body io.ReadCloser)
		src           func() io.Reader
		contentLength int64
		wantRead      string
	}{
		{
			name:          "client closes before EOF",
			src:           func() io.Reader { return strings.NewReader("0123456789") },
			contentLength: 10,
			run: func(t *testing.T, body io.ReadCloser) {
				buf := make([]byte, 4)
				if _, err := io.ReadFull(body, buf); err != nil {
					t.Fatal(err)
				}
				body.Close()
			},
		},
		{
			name:          "chunked body closed before EOF",
			src:           func() io.Reader { return strings.NewReader("0123456789") },
			contentLength: -1,
			run: func(t *testing.T, body io.ReadCloser) {
				buf := make([]byte, 10)
				if _, err := io.ReadFull(body, buf); err != nil {
					t.Fatal(err)
				}
				body.Close()
			},
		},
		{
			name:          "upstream breaks off",
			src:           func() io.Reader { return &errReader{data: []byte("01234"), err: errBroken} },
			contentLength: -1,
			run:           readAllExpectErr(errBroken),
		},
		{
			name:          "body short of Content-Length",
			src:           func() io.Reader { return strings.NewReader("01234") },
			contentLength: 10,
			run:           readAllExpectErr(nil),
		},
		{
			name:          "body longer than Content-Length",
			src:           func() io.Reader { return strings.NewReader("0123456789ABC") },
			contentLength: 10,
			run:           readAllExpectErr(nil),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, reg := newTestCache(t, Options{})
			store(t, c, "k", "previous")
			resp := okResponse(tt.src(), tt.contentLength)
			tee(c, "k", resp)
			tt.run(t, resp.Body)
			resp.Body.Close()
			c.commits.Wait()

			if got, ok := lookupBody(t, c, "k"); !ok || got != "previous" {
				t.Errorf("entry = %q, %v; want the previous complete one", got, ok)
			}
			files := filesIn(t, c.dir)
			if countSuffix(files, tmpSuffix) != 0 || countSuffix(files, bodySuffix) != 1 {
				t.Errorf("files left: %v", files)
			}
			if v := metricValue(t, reg, "nora_sidecar_stale_cache_write_errors_total"); v != 0 {
				t.Errorf("a client or upstream problem counted %v write errors", v)
			}
		})
	}
}

// readAllExpectErr reads to the end and checks the error the client sees is
// the upstream's own, unchanged by the cache.
func readAllExpectErr(want error) func(t *testing.T, body io.ReadCloser) {
	return func(t *testing.T, body io.ReadCloser) {
		_, err := io.ReadAll(body)
		if err != want {
			t.Fatalf("client saw error %v, want %v", err, want)
		}
	}
}

func TestTeeCloseAfterFullKnownLengthCommits(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	resp := okResponse(strings.NewReader("abcdef"), 6)
	tee(c, "k", resp)
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // never read the EOF
	c.commits.Wait()
	if got, ok := lookupBody(t, c, "k"); !ok || got != "abcdef" {
		t.Fatalf("entry = %q, %v", got, ok)
	}
}

func TestTeeObjectOverMaxNotStored(t *testing.T) {
	body := strings.Repeat("z", 101)
	for _, cl := range []int64{101, -1} {
		c, _ := newTestCache(t, Options{MaxObjectBytes: 100})
		resp := okResponse(strings.NewReader(body), cl)
		tee(c, "k", resp)
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != body {
			t.Fatalf("content-length %d: client read %d bytes, %v", cl, len(got), err)
		}
		resp.Body.Close()
		c.commits.Wait()
		if _, ok := lookup(c, "k"); ok {
			t.Errorf("content-length %d: object over MaxObjectBytes was stored", cl)
		}
		if files := filesIn(t, c.dir); len(files) != 0 {
			t.Errorf("content-length %d: files left %v", cl, files)
		}
	}
}

func TestTeeWriteErrorNeverReachesClient(t *testing.T) {
	c, reg := newTestCache(t, Options{})
	body := bytes.Repeat([]byte("w"), 4*teeBufferSize)
	resp := okResponse(bytes.NewReader(body), int64(len(body)))
	tee(c, "k", resp)
	tb := resp.Body.(*teeBody)
	tb.f.Close() // the disk goes away under the writer
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("client read %d bytes, %v; want %d, nil", len(got), err, len(body))
	}
	resp.Body.Close()
	c.commits.Wait()
	if _, ok := lookup(c, "k"); ok {
		t.Error("a body whose write failed was stored")
	}
	if v := metricValue(t, reg, "nora_sidecar_stale_cache_write_errors_total"); v != 1 {
		t.Errorf("write errors = %v, want 1", v)
	}
	if files := filesIn(t, c.dir); len(files) != 0 {
		t.Errorf("files left %v", files)
	}
}

func TestTeeCannotCreateFile(t *testing.T) {
	c, reg := newTestCache(t, Options{})
	// A plain file where the entry's directory belongs makes every write fail.
	if err := os.WriteFile(filepath.Join(c.dir, keyHash("k")[:2]), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resp := okResponse(strings.NewReader("abc"), 3)
	orig := resp.Body
	tee(c, "k", resp)
	if resp.Body != orig {
		t.Error("Tee wrapped the body although it cannot write")
	}
	if v := metricValue(t, reg, "nora_sidecar_stale_cache_write_errors_total"); v != 1 {
		t.Errorf("write errors = %v, want 1", v)
	}
}

func TestTeeAfterCloseIsNoop(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	resp := okResponse(strings.NewReader("abc"), 3)
	inFlight := okResponse(strings.NewReader("def"), 3)
	tee(c, "inflight", inFlight)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	orig := resp.Body
	tee(c, "k", resp)
	if resp.Body != orig {
		t.Error("Tee after Close wrapped the body")
	}
	if b, err := io.ReadAll(inFlight.Body); err != nil || string(b) != "def" {
		t.Fatalf("in-flight client read %q, %v", b, err)
	}
	inFlight.Body.Close()
	if _, ok := lookup(c, "inflight"); ok {
		t.Error("a body finished after Close was committed")
	}
	if files := filesIn(t, c.dir); len(files) != 0 {
		t.Errorf("files left %v", files)
	}
}

func TestStoredHeader(t *testing.T) {
	h := http.Header{
		"Content-Type":          {"application/json"},
		"Etag":                  {`"x"`},
		"Connection":            {"keep-alive, X-Conn-Private"},
		"X-Conn-Private":        {"1"},
		"Keep-Alive":            {"timeout=5"},
		"Transfer-Encoding":     {"chunked"},
		"Set-Cookie":            {"session=secret"},
		"Proxy-Authenticate":    {"Basic"},
		"Content-Length":        {"12"},
		"Age":                   {"100"},
		"Docker-Content-Digest": {"sha256:ab"},
	}
	got := storedHeader(h)
	want := http.Header{
		"Content-Type":          {"application/json"},
		"Etag":                  {`"x"`},
		"Docker-Content-Digest": {"sha256:ab"},
	}
	if len(got) != len(want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	for k, v := range want {
		if got.Get(k) != v[0] {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v[0])
		}
	}
	if h.Get("Set-Cookie") == "" {
		t.Error("storedHeader changed its input")
	}
}

// TestSameKeyLastFinishedWins finishes two writes of one key in a known order
// while their background commits are held back, so the commits race; the body
// that finished last must be the entry every time.
func TestSameKeyLastFinishedWins(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	for i := range 10 {
		first := okResponse(strings.NewReader("first finished"), -1)
		last := okResponse(strings.NewReader("last finished"), -1)
		tee(c, "k", last) // started first, finishes last
		tee(c, "k", first)
		c.commitMu.Lock()
		for _, r := range []*http.Response{first, last} {
			io.ReadAll(r.Body)
			r.Body.Close()
		}
		c.commitMu.Unlock()
		c.commits.Wait()
		if got, _ := lookupBody(t, c, "k"); got != "last finished" {
			t.Fatalf("round %d: entry = %q, want the body that finished last", i, got)
		}
		if files := filesIn(t, c.dir); len(files) != 2 {
			t.Fatalf("round %d: files %v", i, files)
		}
	}
}
