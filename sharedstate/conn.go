package sharedstate

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backoff between attempts to resubscribe after the subscription broke.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// receive keeps one subscription to the events channel and forwards what
// arrives to the loop. Every (re)subscription is reported, because messages
// may have been missed while it was down: the loop then re-reads the state.
// A fresh PubSub per attempt (rather than go-redis's silent reconnects)
// makes every gap visible.
func (c *Client) receive(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		if c.subscribeOnce(ctx) {
			backoff = minBackoff
		}
		c.send(ctx, event{kind: evSubscribed, ok: false})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// subscribeOnce runs one subscription until it fails; it reports whether
// the subscription was ever confirmed.
func (c *Client) subscribeOnce(ctx context.Context) bool {
	ps := c.st.rdb.Subscribe(ctx, c.st.channel())
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	confirmed, silent := false, 0
	for {
		// A quiet channel is normal; a connection that cannot even answer
		// a ping is not. Ping after one quiet period, give up after two.
		msg, err := ps.ReceiveTimeout(ctx, 2*c.ping)
		if err != nil {
			var ne net.Error
			if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() && silent == 0 {
				silent++
				pctx, cancel := c.st.ctx()
				_ = ps.Ping(pctx)
				cancel()
				continue
			}
			if ctx.Err() == nil {
				c.log.Debug().Err(err).Msg("shared state subscription lost")
			}
			return confirmed
		}
		silent = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			confirmed = true
			c.send(ctx, event{kind: evSubscribed, ok: true})
		case *redis.Message:
			c.send(ctx, event{kind: evRemote, payload: m.Payload})
		}
	}
}

// pinger checks Redis every ping interval and tells the loop.
func (c *Client) pinger(ctx context.Context) {
	t := time.NewTicker(c.ping)
	defer t.Stop()
	for {
		err := c.st.ping()
		c.send(ctx, event{kind: evPing, ok: err == nil})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// send hands an event from a background goroutine to the loop, waiting if
// the loop is busy (these goroutines have nothing better to do).
func (c *Client) send(ctx context.Context, ev event) {
	select {
	case c.events <- ev:
	case <-ctx.Done():
	}
}
