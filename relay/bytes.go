package relay

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nora-breaker/nora-breaker/clientconn"
)

// DrainIdle is how long a relayed connection (a blind tunnel, a switched
// protocol) may carry no byte in either direction during a shutdown's
// drain before it is closed: the proxy cannot see where a message inside
// ends, but such a connection nearly always sits between two requests of a
// kept-alive client, which will reconnect to a proxy that is not stopping.
// One that carries bytes is relayed until the grace period ends.
const DrainIdle = 5 * time.Second

// relayed is one relay's pair of connections and when a byte last went
// through, the Drainer a shutdown drains it by.
type relayed struct {
	conns []io.Closer
	last  atomic.Int64 // unix nanos
}

func newRelayed(conns ...io.Closer) *relayed {
	r := &relayed{conns: conns}
	r.touch()
	return r
}

func (r *relayed) touch() { r.last.Store(time.Now().UnixNano()) }

// Drain waits for the relay to end (ctx ends with it) and closes it once
// it has been idle for DrainIdle.
func (r *relayed) Drain(ctx context.Context) {
	tick := time.NewTicker(DrainIdle / 10)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(time.Unix(0, r.last.Load())) >= DrainIdle {
				_ = r.Close()
				return
			}
		}
	}
}

// Close closes both connections.
func (r *relayed) Close() error {
	for _, c := range r.conns {
		_ = c.Close()
	}
	return nil
}

// activity notes every write of the relay.
type activity struct {
	w io.Writer
	r *relayed
}

func (a activity) Write(p []byte) (int, error) {
	a.r.touch()
	return a.w.Write(p)
}

// Tunnel copies bytes both ways between client and upstream until each
// side has ended its stream. A side that ends is passed on as a half-close,
// so the other direction keeps flowing; the idle rule of both connections
// bounds a side that never ends (the caller puts one on the upstream's,
// clientconn.IdleBounded: a host that never closes its end would otherwise
// hold the tunnel once the client's half has ended). The tunnel is registered with ds, so a
// shutdown drains it (nil: not drained).
func Tunnel(client, upstream net.Conn, bufs *Buffers, ds *clientconn.Drainers) {
	r := newRelayed(client, upstream)
	ended := ds.Add(r)
	defer ended()
	var wg sync.WaitGroup
	wg.Go(func() {
		copyHalf(upstream, client, bufs, r)
	})
	copyHalf(client, upstream, bufs, r)
	wg.Wait()
}

// copyHalf copies src to dst through a pooled buffer, then half-closes dst
// (or closes it when it cannot half-close) so its peer sees the end.
func copyHalf(dst, src net.Conn, bufs *Buffers, r *relayed) {
	bp := bufs.get()
	_, _ = io.CopyBuffer(activity{dst, r}, onlyReader{src}, *bp)
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
// ends. It is registered with ds like a tunnel. A write to the upstream
// that has not completed within the client connection's idle timeout ends
// the relay (stalledWriter).
func Switched(client net.Conn, fromClient io.Reader, upstream io.ReadWriteCloser, ds *clientconn.Drainers) {
	r := newRelayed(client, upstream)
	ended := ds.Add(r)
	defer ended()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(activity{stalledWriter{upstream, clientconn.IdleOf(client), r}, r}, fromClient)
		_ = upstream.Close()
		close(done)
	}()
	_, _ = io.Copy(activity{client, r}, upstream)
	_ = client.Close()
	<-done
}

// stalledWriter ends the relay r when a write to the upstream has not
// completed within idle. The upstream side of a protocol switch is the
// body of a 101, which has no deadlines: an upstream that stops reading,
// writing and closing while the client keeps sending fills the buffers
// between them, and then no byte moves either way (docs/behaviour.md §5.1:
// idle_timeout on a tunnel) with both copies waiting on the upstream and no
// read or write pending on the client's connection for its idle rule to
// cut. The bound is the one the client side has: a write that does not
// complete within idle fails. idle <= 0 leaves writes unbounded.
type stalledWriter struct {
	w    io.Writer
	idle time.Duration
	r    *relayed
}

func (s stalledWriter) Write(p []byte) (int, error) {
	if s.idle <= 0 {
		return s.w.Write(p)
	}
	t := time.AfterFunc(s.idle, func() { _ = s.r.Close() })
	defer t.Stop()
	return s.w.Write(p)
}
