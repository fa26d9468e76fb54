package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// blackHole is a TCP server that accepts connections and then does
// nothing with them: it never reads, never writes and never closes, as a
// hung host or middlebox does. It counts the connections it accepted.
type blackHole struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b
}

func (b *blackHole) accepted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// TestIdleTunnelToASilentUpstreamIsClosed: a blind tunnel that carries no
// byte in either direction for idle_timeout is closed (docs/behaviour.md
// §5.1, §10) also when its upstream is a black hole that never closes its
// end, whether the client stays silent, half-closes its side or keeps
// sending until the buffers between it and the black hole are full, and its
// max_connections slot is free again for the next client.
func TestIdleTunnelToASilentUpstreamIsClosed(t *testing.T) {
	for _, client := range []string{"silent", "half-closes", "keeps sending"} {
		t.Run("client "+client, func(t *testing.T) {
			hole := newBlackHole(t)
			ok := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			holeAddr := hole.ln.Addr().String()
			tp := newTestProxy(t, fmt.Sprintf("[sidecar]\nidle_timeout = %q\nmax_connections = 1\n"+
				"allow_hosts = [%q, %q]\n", stallIdle.String(), holeAddr, strings.TrimPrefix(ok.URL, "http://")), nil)
			resp, conn, br := ixRawConnect(t, tp, holeAddr)
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			testkit.PollUntil(t, 5*time.Second, func() bool { return hole.accepted() == 1 })
			switch client {
			case "half-closes":
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			case "keeps sending":
				go func() {
					chunk := make([]byte, 256<<10)
					for {
						if _, err := conn.Write(chunk); err != nil {
							return
						}
					}
				}()
			}
			start := time.Now()
			conn.SetReadDeadline(start.Add(20*stallIdle + 5*time.Second))
			_, err := br.ReadByte()
			var ne net.Error
			if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("idle tunnel to a silent upstream still open after %v: %v", time.Since(start), err)
			}
			// The slot is free again: the next client is served.
			testkit.PollUntil(t, 5*time.Second, func() bool {
				resp := rawExchange(t, tp, stallGet(ok, "/x"))
				return resp != nil && resp.StatusCode == http.StatusOK
			})
		})
	}
}
