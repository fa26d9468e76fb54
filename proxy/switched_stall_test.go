package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSwitchedProtocolToAStalledUpstreamIdlesOut: a websocket whose
// upstream, after its 101, neither reads nor writes nor closes, while the
// client keeps sending, stops moving bytes once the buffers between them are
// full; it is closed after idle_timeout of that (docs/behaviour.md §5.1:
// idle_timeout on a tunnel, both parties) and its slot is free again.
func TestSwitchedProtocolToAStalledUpstreamIdlesOut(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		<-hold // stalled: never reads, writes or closes
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, fmt.Sprintf("[sidecar]\nidle_timeout = %q\n", stallIdle.String())), nil)
	conn, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(up.URL, "http://")
	io.WriteString(conn, "GET "+up.URL+"/maven2/ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\n"+
		"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	start := time.Now()
	ended := make(chan error, 1)
	go func() {
		chunk := make([]byte, 256<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		t.Logf("the stalled websocket was closed after %v: %v", time.Since(start), err)
	case <-time.After(20*stallIdle + 10*time.Second):
		t.Fatalf("a websocket whose upstream stalled still open after %v", time.Since(start))
	}
}
