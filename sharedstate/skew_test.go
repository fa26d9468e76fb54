package sharedstate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// skewReset is the reset_timeout of the skew tests: NORA's default, so
// that an hour of clock skew is two orders of magnitude above it.
const skewReset = 30 * time.Second

// skewedUntil is the open_until a pod whose clock runs an hour ahead
// writes for an open it has just decided: its own now + reset_timeout.
func skewedUntil() int64 { return time.Now().Add(time.Hour + skewReset).UnixMilli() }

// rawRedis is a plain client for writing what another (older or broken)
// pod would write.
func rawRedis(t *testing.T, r *redisServer) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(r.url())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// skewNode is a node whose key has skewReset, without jitter, so that the
// bound is exact.
func skewNode(t *testing.T, name string, r *redisServer) *node {
	t.Helper()
	return newNodeWith(t, name, newUpstream(t), r.url(), breakerstate.KeySettings{Key: fleetKey, Format: "docker",
		FailureThreshold: threshold, ResetTimeout: skewReset})
}

// A message as a pod whose clock runs an hour ahead sends it cannot hold a
// healthy upstream open for an hour: the open it causes here lasts at most
// this process's own reset_timeout (issue 21, point 3).
func TestSkewedPeerMessageIsBounded(t *testing.T) {
	r := startRedis(t)
	n := skewNode(t, "pod-0", r)
	waitUp(t, []*node{n}, true)
	msg := fmt.Sprintf(`{"op":"open","key":%q,"until":%d,"pod":"skewed"}`, fleetKey, skewedUntil())
	if err := rawRedis(t, r).Publish(context.Background(), "nora-breaker:events", msg).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the open reaches the node", func() bool { return n.state() == breakerstate.Open })
	if _, ra, _ := n.set.RetryAfter(fleetKey); ra > skewReset {
		t.Fatalf("Retry-After %v after a skewed peer's open, want <= reset_timeout %v", ra, skewReset)
	}
}

// The record such a pod leaves in Redis is bounded the same way for a pod
// that joins later and reads it.
func TestSkewedPeerRecordIsBounded(t *testing.T) {
	r := startRedis(t)
	rec := fmt.Sprintf(`{"mode":"open","until":%d,"pod":"skewed"}`, skewedUntil())
	if err := rawRedis(t, r).Set(context.Background(), "nora-breaker:state:"+fleetKey, rec, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	n := skewNode(t, "late", r)
	waitUp(t, []*node{n}, true)
	eventually(t, 2*time.Second, "the late joiner applies the record", func() bool { return n.state() == breakerstate.Open })
	if _, ra, _ := n.set.RetryAfter(fleetKey); ra > skewReset {
		t.Fatalf("Retry-After %v from a skewed peer's record, want <= reset_timeout %v", ra, skewReset)
	}
}
