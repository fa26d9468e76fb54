package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// Every wrapper the listener stacks on a client connection must keep
// half-close working: goproxy's tunnels call CloseWrite to pass on a client's
// end of stream while the other direction keeps flowing.
func TestListenerConnsKeepHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limited := newLimitListener(ln, 4, time.Minute)
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
	for _, c := range []net.Conn{server, newIdleConn(server, time.Minute),
		&replayConn{halfCloser: halfCloser{server}}} {
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
