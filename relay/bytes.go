package relay

import (
	"io"
	"net"
	"sync"
)

// Tunnel copies bytes both ways between client and upstream until each
// side has ended its stream. A side that ends is passed on as a half-close,
// so the other direction keeps flowing; the client connection's idle rule
// bounds a side that never ends.
func Tunnel(client, upstream net.Conn, bufs *Buffers) {
	var wg sync.WaitGroup
	wg.Go(func() {
		copyHalf(upstream, client, bufs)
	})
	copyHalf(client, upstream, bufs)
	wg.Wait()
}

// copyHalf copies src to dst through a pooled buffer, then half-closes dst
// (or closes it when it cannot half-close) so its peer sees the end.
func copyHalf(dst, src net.Conn, bufs *Buffers) {
	bp := bufs.get()
	_, _ = io.CopyBuffer(dst, onlyReader{src}, *bp)
	bufs.put(bp)
	if hc, ok := dst.(interface{ CloseWrite() error }); !ok || hc.CloseWrite() != nil {
		_ = dst.Close()
		_ = src.Close()
	}
}

// onlyReader hides a connection's WriteTo, so io.CopyBuffer uses our buffer
// instead of allocating its own.
type onlyReader struct{ io.Reader }

// Switched relays a switched protocol (a websocket after a 101) between the
// hijacked client connection, read through fromClient (which may hold bytes
// already read from it), and the upstream connection, until either side
// ends.
func Switched(client net.Conn, fromClient io.Reader, upstream io.ReadWriteCloser) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(upstream, fromClient)
		_ = upstream.Close()
		close(done)
	}()
	_, _ = io.Copy(client, upstream)
	_ = client.Close()
	<-done
}
