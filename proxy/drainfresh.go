package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/nora-breaker/nora-breaker/clientconn"
)

// freshConns is the set of the proxy port's connections that have not sent
// a request yet (http.StateNew), kept by the server's ConnState hook.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (f *freshConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == http.StateNew {
		if f.conns == nil {
			f.conns = map[net.Conn]struct{}{}
		}
		f.conns[c] = struct{}{}
		return
	}
	delete(f.conns, c)
}

func (f *freshConns) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// drainFresh is the first step of the proxy port's drain, before
// http.Server.Shutdown: Shutdown closes a connection whose request it reads
// once the shutdown has begun without answering it, so a client that
// connected just before the shutdown and sends its request just after
// would see its connection closed (docs/behaviour.md §8). drainFresh stops
// accepting (ln closed), ends keep-alives (an idle connection closes at
// once, an answer in flight says Connection: close) and returns once no
// connection without a request is left: each has sent one, which is
// answered, or has been closed once 5 s old by net/http's rule for such
// connections (clientconn.EndKeepAlives); or when ctx is done.
func drainFresh(ctx context.Context, srv *http.Server, ln net.Listener, fresh *freshConns) {
	_ = ln.Close()
	clientconn.EndKeepAlives(ctx, srv, func() bool { return fresh.len() == 0 })
}
