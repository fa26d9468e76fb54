package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// stallIdle is the idle_timeout of these tests: short, so a stalled write
// is cut quickly, and far above a loaded machine's scheduling hiccups.
const stallIdle = 300 * time.Millisecond

// stallUpstream serves /big (a body far larger than any socket buffers,
// written until the proxy stops taking it), /sized/<n> (n bytes), /slow (headers
// after three idle timeouts) and anything else as "ok".
func stallUpstream(t *testing.T) *upstream {
	chunk := make([]byte, 64<<10)
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/big":
			w.Header().Set("Content-Length", strconv.Itoa(1<<30))
			for i := 0; i < (1<<30)/len(chunk); i++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case strings.HasPrefix(r.URL.Path, "/sized/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/sized/"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			for n > 0 {
				k := min(n, len(chunk))
				if _, err := w.Write(chunk[:k]); err != nil {
					return
				}
				n -= k
			}
		case r.URL.Path == "/slow":
			select {
			case <-time.After(3 * stallIdle):
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "slow but sure")
		default:
			io.WriteString(w, "ok")
		}
	})
}

// stallProxy is a proxy with the short idle timeout and room for one
// client connection, so a held slot shows as a 503 to the next client; up
// is no upstream, so allow_hosts lets the proxy reach it.
func stallProxy(t *testing.T, up *upstream) *testProxy {
	return newTestProxy(t, stallConfig(up), nil)
}

func stallConfig(up *upstream) string {
	return fmt.Sprintf("[sidecar]\nidle_timeout = %q\nmax_connections = 1\n%s\n", stallIdle.String(), allowHostsLine(up))
}

// writeTimer is a proxy listener whose accepted connections have a small
// send buffer and add the time each of their writes takes to blocked: how
// long the proxy waited for its clients to take bytes.
type writeTimer struct {
	net.Listener
	blocked atomic.Int64 // nanoseconds
}

func (l *writeTimer) Accept() (net.Conn, error) {
	c, err := smallSendListener{l.Listener}.Accept()
	if err != nil {
		return c, err
	}
	return &timedWriteConn{Conn: c, blocked: &l.blocked}, nil
}

type timedWriteConn struct {
	net.Conn
	blocked *atomic.Int64
}

func (c *timedWriteConn) Write(p []byte) (int, error) {
	start := time.Now()
	n, err := c.Conn.Write(p)
	c.blocked.Add(int64(time.Since(start)))
	return n, err
}

func stallGet(up *upstream, path string) string {
	host := strings.TrimPrefix(up.URL, "http://")
	return "GET " + up.URL + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
}

// TestStalledWriteEndsTheConnection: a client that asks for a large body
// and never reads it is cut once the proxy's write has made no progress for
// idle_timeout; its connection closes and its max_connections slot is free
// again for the next client.
func TestStalledWriteEndsTheConnection(t *testing.T) {
	up := stallUpstream(t)
	tp := stallProxy(t, up)
	stalled, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stalled.Close() })
	start := time.Now()
	if _, err := io.WriteString(stalled, stallGet(up, "/big")); err != nil {
		t.Fatal(err)
	}
	// While the stalled client holds the only slot, others get 503. Each
	// try is a full exchange; the bound leaves a loaded machine plenty of
	// time to fill the socket buffers and notice the stall.
	var freed time.Duration
	testkit.PollUntil(t, 20*stallIdle+5*time.Second, func() bool {
		resp := rawExchange(t, tp, stallGet(up, "/ok"))
		if resp != nil && resp.StatusCode == http.StatusOK {
			freed = time.Since(start)
			return true
		}
		return false
	})
	t.Logf("slot free again %v after the request (idle_timeout %v)", freed, stallIdle)
	// The write is cut only once it has made no progress for idle_timeout.
	if freed < stallIdle {
		t.Errorf("slot free again %v after the request, before idle_timeout %v", freed, stallIdle)
	}
	// The stalled connection itself was closed: reading what the socket
	// buffers still hold ends in EOF or a reset, not in our deadline.
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, stalled)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the stalled connection is still open (%d bytes read)", n)
	}
	if n >= 1<<30 {
		t.Fatalf("the whole body arrived; nothing was cut")
	}
}

// TestSlowReaderIsNotCut: a client that reads a large body slowly, with
// pauses well under idle_timeout, gets all of it, although the transfer
// takes many idle timeouts.
func TestSlowReaderIsNotCut(t *testing.T) {
	up := stallUpstream(t)
	// Small socket buffers on both sides: the body is far larger than what
	// the kernel can hold between the proxy and the client, so the proxy's
	// writes block on the reader's pace (with loopback's megabytes of
	// buffering the whole body would be written at once, and nothing would
	// wait).
	wt := &writeTimer{}
	tp := startProxyWrapped(t, testkit.LoadConfig(t, stallConfig(up), nil), zerolog.Nop(),
		func(ln net.Listener) net.Listener { wt.Listener = ln; return wt })
	const size = 512 << 10
	conn, err := smallReadDialer().Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(conn, stallGet(up, "/sized/"+strconv.Itoa(size))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer: %v %v", resp, err)
	}
	start := time.Now()
	tick := time.NewTicker(stallIdle / 6) // the reader's own pace, not a wait for state
	defer tick.Stop()
	buf := make([]byte, 16<<10)
	got := 0
	for got < size {
		<-tick.C
		n, err := io.ReadFull(resp.Body, buf[:min(len(buf), size-got)])
		got += n
		if err != nil {
			t.Fatalf("cut after %d of %d bytes, %v into the body: %v", got, size, time.Since(start), err)
		}
	}
	if d := time.Since(start); d < 2*stallIdle {
		t.Fatalf("the body took %v, under two idle timeouts: the test proves nothing", d)
	}
	// The proxy's side: its writes waited for the reader, in all, longer
	// than two idle timeouts (each wait shorter than one).
	if b := time.Duration(wt.blocked.Load()); b < 2*stallIdle {
		t.Fatalf("the proxy's writes waited %v in all for the reader, under two idle timeouts: "+
			"they never blocked, the test proves nothing", b)
	}
}

// TestWaitingForUpstreamHeadersIsNotAStall: the write deadline runs only
// while a write is under way, so a client waiting longer than idle_timeout
// for a slow upstream's headers gets its answer.
func TestWaitingForUpstreamHeadersIsNotAStall(t *testing.T) {
	up := stallUpstream(t)
	tp := stallProxy(t, up)
	resp := rawExchange(t, tp, stallGet(up, "/slow"))
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, want the slow upstream's 200", statusOf(resp))
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "slow but sure" {
		t.Fatalf("body %q", b)
	}
}
