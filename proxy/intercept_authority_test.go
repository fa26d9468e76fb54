package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// probeRawH2 is a hand-driven HTTP/2 client connection inside a tunnel.
type probeRawH2 struct {
	tc *tls.Conn
	fr *http2.Framer
}

// probeRawH2In opens an intercepted tunnel to the upstream and sends the
// HTTP/2 preface and the given SETTINGS inside it.
func probeRawH2In(t *testing.T, ix *ixIntercept, settings ...http2.Setting) *probeRawH2 {
	t.Helper()
	target := strings.TrimPrefix(ix.up.URL, "https://")
	tc := ixTLSInTunnel(t, ix.tp, ix.ca, target, "h2")
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return &probeRawH2{tc: tc, fr: fr}
}

// headers sends one HEADERS frame (END_STREAM) with the fields in order.
func (c *probeRawH2) headers(t *testing.T, stream uint32, fields ...string) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: buf.Bytes(),
		EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// status reads frames until stream's response headers and returns :status.
func (c *probeRawH2) status(t *testing.T, stream uint32) string {
	t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == stream {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == stream {
				return "RST " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// TestInterceptH2AuthorityOtherThanTheTarget: an HTTP/2 request inside an
// intercepted tunnel whose :authority names another host, with an absolute
// :path naming the CONNECT target, names another host than the CONNECT's:
// 421, and the upstream is never asked (docs/behaviour.md §5.2). On main
// the check looked at the URL alone (net/http's HTTP/2 server takes it from
// the :path), and the upstream got the foreign host as its Host on a
// connection dialled and verified for the target: a request for another
// virtual host of the same server, whose answer the stale cache and other
// clients sharing the fetch would take for the target's.
func TestInterceptH2AuthorityOtherThanTheTarget(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "jar")
	})
	target := strings.TrimPrefix(ix.up.URL, "https://")
	for i, authority := range []string{"evil.example", target} {
		c := probeRawH2In(t, ix)
		c.headers(t, 1, ":method", "GET", ":scheme", "https", ":authority", authority,
			":path", "https://"+target+"/maven2/g/a.jar")
		status := c.status(t, 1)
		mu.Lock()
		seen := len(hosts)
		mu.Unlock()
		want, wantSeen := "421", 0
		if i == 1 {
			want, wantSeen = "200", 1 // the target itself, spelled both ways
		}
		if status != want || seen != wantSeen {
			t.Fatalf(":authority %s: got %s, the upstream asked %d times (Hosts %q); want %s, %d", authority,
				status, seen, hosts, want, wantSeen)
		}
	}
}
