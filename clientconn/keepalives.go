package clientconn

import (
	"context"
	"net/http"
	"time"
)

// keepAlivePoll is how often EndKeepAlives applies net/http's rule again;
// http.Server.Shutdown looks at its connections at most this far apart.
const keepAlivePoll = 500 * time.Millisecond

// EndKeepAlives ends srv's keep-alives for a drain (docs/behaviour.md §8):
// an idle connection closes at once, an answer in flight says Connection:
// close, and a connection that has sent no request yet is closed once it
// is 5 s old. net/http applies that last rule only when keep-alives are
// turned off, so this turns them off again every keepAlivePoll, on the
// plain port and inside an intercepted tunnel alike, until done reports
// true (nil: never) or ctx ends.
func EndKeepAlives(ctx context.Context, srv *http.Server, done func() bool) {
	tick := time.NewTicker(keepAlivePoll)
	defer tick.Stop()
	for {
		srv.SetKeepAlivesEnabled(false)
		if done != nil && done() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
