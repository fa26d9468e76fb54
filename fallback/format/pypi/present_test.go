package pypi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// The candidate index in these tests is b.test; the client asked another
// index (a.test), so every relative link of b.test's pages must come out
// absolute against b.test, whatever the encoding b.test chose.

const (
	candidatePage = "https://b.test/simple/x/"
	relHTML       = `<!DOCTYPE html><html><body><a href="../../packages/x-1.0.tar.gz` + sha + `">x-1.0.tar.gz</a></body></html>`
	relJSON       = `{"meta":{"api-version":"1.1"},"name":"x","files":[{"filename":"x-1.0.tar.gz","url":"../../packages/x-1.0.tar.gz` + sha + `"}]}`
	absLink       = "https://b.test/packages/x-1.0.tar.gz" + sha
)

// coding is one way a candidate may encode its page.
type coding struct {
	label  string
	name   string // the Content-Encoding it sends
	encode func(t testing.TB, b []byte) []byte
	decode func(t testing.TB, b []byte) []byte
}

func codings() []coding {
	return []coding{
		{"plain", "", func(_ testing.TB, b []byte) []byte { return b }, func(_ testing.TB, b []byte) []byte { return b }},
		{"gzip", "gzip", gzipBytes, gunzipBytes},
		// RFC 9110 §8.4.1.2: "deflate" is the zlib format; some servers
		// send raw deflate under the same name, and both are read.
		{"deflate (zlib)", "deflate", zlibBytes, unzlibBytes},
		{"deflate (raw)", "deflate", rawDeflateBytes, unRawDeflateBytes},
		{"identity", "identity", func(_ testing.TB, b []byte) []byte { return b }, func(_ testing.TB, b []byte) []byte { return b }},
		{"deflate then gzip", "deflate, gzip", func(t testing.TB, b []byte) []byte { return gzipBytes(t, zlibBytes(t, b)) },
			func(t testing.TB, b []byte) []byte { return unzlibBytes(t, gunzipBytes(t, b)) }},
	}
}

// candidateAnswer is b.test's 200 to a GET of the page, body as given.
func candidateAnswer(t *testing.T, contentType, encoding string, body []byte) (*http.Request, *http.Response) {
	t.Helper()
	client := httptest.NewRequest(http.MethodGet, "https://a.test/simple/x/", nil)
	client.Header.Set("Accept-Encoding", "gzip, deflate")
	out := httptest.NewRequest(http.MethodGet, candidatePage, nil)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: out,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
	resp.Header.Set("Content-Type", contentType)
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Set("Vary", "Accept-Encoding")
	if encoding != "" {
		resp.Header.Set("Content-Encoding", encoding)
	}
	return client, resp
}

// TestPresentRewritesEveryEncoding: a candidate's simple page (HTML and
// JSON) with relative links is rewritten whether it came plain, gzipped or
// deflated, and reaches the client in the encoding the candidate chose
// (which the client's Accept-Encoding admitted), with a Content-Length
// that fits. It failed before the rewrite read encoded pages: the links
// stayed relative, and pip asked the index the client addressed for them.
func TestPresentRewritesEveryEncoding(t *testing.T) {
	for _, page := range []struct{ kind, contentType, body string }{
		{"html", htmlType, relHTML},
		{"json", jsonType, relJSON},
	} {
		for _, c := range codings() {
			t.Run(page.kind+"/"+c.label, func(t *testing.T) {
				client, resp := candidateAnswer(t, page.contentType, c.name, c.encode(t, []byte(page.body)))
				storable := Format{}.Present(client, resp, "")
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Header.Get("Content-Encoding") != c.name {
					t.Fatalf("Content-Encoding %q, want the candidate's %q", resp.Header.Get("Content-Encoding"), c.name)
				}
				if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(got)) || resp.ContentLength != int64(len(got)) {
					t.Fatalf("Content-Length %q (field %d) for %d bytes", cl, resp.ContentLength, len(got))
				}
				plain := c.decode(t, got)
				if !bytes.Contains(plain, []byte(absLink)) || bytes.Contains(plain, []byte(`"../../packages/`)) {
					t.Fatalf("links not made absolute against %s:\n%s", candidatePage, plain)
				}
				if !storable {
					t.Fatal("a page made right is not storable")
				}
			})
		}
	}
}

// TestPresentUnchangedPageKeepsItsBytes: a compressed page whose links are
// all absolute (pypi.org's) is passed on byte for byte, never re-encoded.
func TestPresentUnchangedPageKeepsItsBytes(t *testing.T) {
	body := gzipBytes(t, []byte(`<a href="https://files.pythonhosted.org/packages/x.whl`+sha+`">x</a>`))
	client, resp := candidateAnswer(t, htmlType, "gzip", body)
	if !(Format{}).Present(client, resp, "") {
		t.Fatal("an absolute-only page is not storable")
	}
	if got, _ := io.ReadAll(resp.Body); !bytes.Equal(got, body) {
		t.Fatal("the candidate's bytes were re-encoded though no link changed")
	}
}

// TestPresentPageThatCannotBeMadeRight: a page the rewrite cannot read is
// still served, with the candidate's bytes, but reported not storable, so
// it never replaces a good stale copy of the page the client addressed.
func TestPresentPageThatCannotBeMadeRight(t *testing.T) {
	big := pypiTestPage(maxPyPIPage+1, false)
	bomb := gzipBytes(t, big) // small on the wire, too large once decoded
	corrupt := gzipBytes(t, []byte(relHTML))
	corrupt = corrupt[:len(corrupt)-6] // its checksum and length cut off
	for _, tc := range []struct {
		name, encoding string
		body           []byte
		contentLength  int64 // 0: the body's length
	}{
		{"unknown encoding", "br", []byte("\x0b\x02\x80not really brotli"), 0},
		{"unknown encoding in a list", "gzip, zstd", []byte("zstd bytes"), 0},
		{"corrupt gzip", "gzip", corrupt, 0},
		{"not gzip at all", "gzip", []byte(relHTML), 0},
		{"decodes past the bound", "gzip", bomb, 0},
		{"too large", "", big, 0},
		{"announced too large", "", []byte(relHTML), maxPyPIPage + 1},
		{"broken JSON", "", []byte(`{"files":[{"url":"../x.whl"}`), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := htmlType
			if strings.Contains(tc.name, "JSON") {
				ct = jsonType
			}
			client, resp := candidateAnswer(t, ct, tc.encoding, tc.body)
			if tc.contentLength != 0 {
				resp.ContentLength = tc.contentLength
			}
			if (Format{}).Present(client, resp, "") {
				t.Fatal("a page that could not be made right is storable")
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, tc.body) {
				t.Fatalf("the client got %d bytes (%v), want the candidate's %d unchanged", len(got), err, len(tc.body))
			}
			if resp.Header.Get("Content-Encoding") != tc.encoding {
				t.Fatalf("Content-Encoding %q, want %q", resp.Header.Get("Content-Encoding"), tc.encoding)
			}
		})
	}
}

// TestPresentLeavesOtherAnswers: a file, a HEAD and a non-200 are not
// pages to rewrite, and stay storable.
func TestPresentLeavesOtherAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, method, contentType string
		status                    int
	}{
		{"a file", http.MethodGet, "application/octet-stream", 200},
		{"a HEAD", http.MethodHead, htmlType, 200},
		{"a 404", http.MethodGet, htmlType, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := gzipBytes(t, []byte(relHTML))
			client, resp := candidateAnswer(t, tc.contentType, "gzip", body)
			client.Method, resp.StatusCode = tc.method, tc.status
			if !(Format{}).Present(client, resp, "") {
				t.Fatal("not storable")
			}
			if got, _ := io.ReadAll(resp.Body); !bytes.Equal(got, body) {
				t.Fatal("body changed")
			}
		})
	}
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil || w.Close() != nil {
		t.Fatal("gzip failed")
	}
	return buf.Bytes()
}

func gunzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

func zlibBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	if _, err := w.Write(b); err != nil || w.Close() != nil {
		t.Fatal("zlib failed")
	}
	return buf.Bytes()
}

func unzlibBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	r, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not zlib: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("zlib: %v", err)
	}
	return out
}

func rawDeflateBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	if _, err := w.Write(b); err != nil || w.Close() != nil {
		t.Fatal("deflate failed")
	}
	return buf.Bytes()
}

func unRawDeflateBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(flate.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("raw deflate: %v", err)
	}
	return out
}

// FuzzPresentEncoded: whatever bytes a candidate sends under a coding the
// rewrite reads, Present either makes a page that decodes the same way
// (storable) or passes the bytes on exactly (not storable).
func FuzzPresentEncoded(f *testing.F) {
	f.Add("gzip", false, gzipBytes(f, []byte(relHTML)))
	f.Add("deflate", true, zlibBytes(f, []byte(relJSON)))
	f.Add("deflate", false, rawDeflateBytes(f, []byte(relHTML)))
	f.Add("gzip", false, []byte("\x1f\x8b\x08\x00garbage"))
	f.Add("deflate, gzip", true, []byte{})
	f.Fuzz(func(t *testing.T, encoding string, isJSON bool, body []byte) {
		ct := htmlType
		if isJSON {
			ct = jsonType
		}
		client, resp := candidateAnswer(t, ct, encoding, body)
		storable := Format{}.Present(client, resp, "")
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Content-Encoding") != encoding || resp.ContentLength != int64(len(got)) {
			t.Fatalf("headers %v for %d bytes", resp.Header, len(got))
		}
		if !storable {
			if !bytes.Equal(got, body) {
				t.Fatal("a page that could not be made right was changed")
			}
			return
		}
		codings, err := format.BodyCodings(resp.Header)
		if err != nil {
			t.Fatalf("storable in an unknown coding %q", encoding)
		}
		if _, _, err := format.DecodeBody(got, codings, maxPyPIPage); err != nil {
			t.Fatalf("storable page does not decode: %v", err)
		}
	})
}

// TestPresentRewrittenPageDropsTheCandidatesValidators: a page whose links
// were rewritten is not the bytes the candidate's ETag and digests name;
// kept, they would let a client's next conditional request (If-None-Match,
// to whichever index) keep the rewritten page as the index's own, and a
// client that checks Content-Digest would refuse it. An unchanged page keeps
// them.
func TestPresentRewrittenPageDropsTheCandidatesValidators(t *testing.T) {
	validators := []string{"Etag", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"}
	for _, tc := range []struct {
		name    string
		body    string
		rewrite bool
	}{
		{"rewritten", relHTML, true},
		{"unchanged", `<a href="https://files.pythonhosted.org/packages/x.whl` + sha + `">x</a>`, false},
	} {
		client, resp := candidateAnswer(t, htmlType, "gzip", gzipBytes(t, []byte(tc.body)))
		for _, h := range validators {
			resp.Header.Set(h, "from-b.test")
		}
		Format{}.Present(client, resp, "")
		for _, h := range validators {
			if got := resp.Header.Get(h) != ""; got == tc.rewrite {
				t.Errorf("%s page: %s kept = %v", tc.name, h, got)
			}
		}
	}
}
