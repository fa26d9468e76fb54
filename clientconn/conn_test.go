package clientconn

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestStallConnCountsProgress: one write that takes many idle timeouts to
// drain succeeds while the reader keeps taking bytes, and a write nobody
// reads fails after about one idle timeout. net.Pipe hands the writer each
// byte as the reader takes it, so progress is exact.
func TestStallConnCountsProgress(t *testing.T) {
	// 300 ms, not shorter: the reader's pace (a quarter of it) must stay
	// well under the idle timeout on a loaded machine.
	const idle = 300 * time.Millisecond
	t.Run("slow reader", func(t *testing.T) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		c := newConn(server, idle, nil)
		done := make(chan error, 1)
		payload := make([]byte, 16<<10)
		go func() {
			_, err := c.Write(payload)
			done <- err
		}()
		start := time.Now()
		tick := time.NewTicker(idle / 4) // the reader's pace
		defer tick.Stop()
		buf := make([]byte, 1<<10)
		_ = client.SetReadDeadline(start.Add(10 * time.Second)) // in case the writer gives up
		for got := 0; got < len(payload); {
			<-tick.C
			n, err := client.Read(buf)
			if err != nil {
				t.Fatalf("after %d of %d bytes: %v (the write: %v)", got, len(payload), err, <-done)
			}
			got += n
		}
		if err := <-done; err != nil {
			t.Fatalf("a write that kept making progress failed after %v: %v", time.Since(start), err)
		}
		if d := time.Since(start); d < 3*idle {
			t.Fatalf("the write drained in %v; the test needs several idle timeouts", d)
		}
	})
	t.Run("nobody reads", func(t *testing.T) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		c := newConn(server, idle, nil)
		start := time.Now()
		_, err := c.Write([]byte("hello"))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err = %v, want a deadline error", err)
		}
		if d := time.Since(start); d < idle {
			t.Fatalf("failed after %v, before the idle timeout", d)
		}
	})
	t.Run("hijacked: net/http's rule gives way to the idle rule", func(t *testing.T) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		c := newConn(server, idle, nil)
		MarkHijacked(c)
		// A tunnel whose client keeps sending: each read refreshes the
		// deadline, so a write that waits on the client for longer than
		// idle in all still goes through while the other direction moves.
		go func() {
			for range 6 {
				<-time.After(idle / 2)
				_, _ = client.Write([]byte("x"))
			}
			_, _ = io.Copy(io.Discard, client)
		}()
		go func() {
			buf := make([]byte, 1)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatalf("a write on a tunnel whose other direction kept moving failed after %v: %v", time.Since(start), err)
		}
	})
	t.Run("hijacked: silence in both directions ends it", func(t *testing.T) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		c := newConn(server, idle, nil)
		MarkHijacked(c)
		start := time.Now()
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read on a silent tunnel = %v, want a deadline error", err)
		}
		if d := time.Since(start); d < idle*7/8 {
			t.Fatalf("a silent tunnel ended after %v, before 7/8 of the idle timeout", d)
		}
	})
	t.Run("hijacked: a user's deadline is a cap", func(t *testing.T) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		c := newConn(server, 10*idle, nil)
		MarkHijacked(c)
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(idle))
		// Traffic the other way refreshes the idle deadline, never past
		// the cap.
		go func() { _, _ = io.Copy(io.Discard, client) }()
		go func() {
			for range 20 {
				<-time.After(idle / 8)
				if _, err := c.Write([]byte("y")); err != nil {
					return
				}
			}
		}()
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read = %v, want the capped deadline", err)
		}
		if d := time.Since(start); d > 5*idle {
			t.Fatalf("the read deadline cap was moved: read ended after %v", d)
		}
	})
}

// Every wrapper the listener stacks on a client connection must keep
// half-close working: goproxy's tunnels call CloseWrite to pass on a client's
// end of stream while the other direction keeps flowing.
func TestListenerConnsKeepHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited := NewListener(ln, 4, time.Minute)
	t.Cleanup(func() { limited.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err := limited.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	for _, c := range []net.Conn{server, Replay(server, []byte("x")), Framed(server)} {
		if _, ok := c.(interface{ CloseWrite() error }); !ok {
			t.Fatalf("%T hides CloseWrite", c)
		}
	}
	if err := server.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatalf("CloseWrite through the wrappers: %v", err)
	}
	_ = client.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer read after half-close: %d %v, want EOF", n, err)
	}
	// The other direction still works.
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = server.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatalf("read after our half-close: %v", err)
	}
}

// TestRawAnswerIsWellFormed: the answers written straight to a connection
// parse as HTTP, with exactly the body their Content-Length announces.
func TestRawAnswerIsWellFormed(t *testing.T) {
	raw := RawAnswer(http.StatusServiceUnavailable, "Retry-After: 1\r\n", "nora-breaker: too many client connections\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "nora-breaker: too many client connections\r\n\r\n" {
		t.Fatalf("body %q, %v", body, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("status %d, headers %v, close %v", resp.StatusCode, resp.Header, resp.Close)
	}
}

// TestHijackedAlwaysHasTheIdleRule: a connection that did not come from
// the Listener gets the hijacked idle rule when it is hijacked, and one
// that did is not wrapped twice.
func TestHijackedAlwaysHasTheIdleRule(t *testing.T) {
	const idle = 200 * time.Millisecond
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	c := Hijacked(server, idle)
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("Hijacked(%T) = %T, want a *Conn", server, c)
	}
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a silent hijacked connection = %v, want a deadline error", err)
	}
	if d := time.Since(start); d < idle*7/8 {
		t.Fatalf("ended after %v, before 7/8 of the idle timeout", d)
	}
	own := newConn(client, idle, nil)
	if got := Hijacked(own, idle); got != net.Conn(own) {
		t.Fatalf("a listener connection was wrapped again: %T", got)
	}
}
