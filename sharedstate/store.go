package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// openScript records open_until for a key unless the fleet already knows a
// later one or an operator forced the key, publishes the change, and drops
// the caller's spent probe lease, all atomically. It returns the open_until
// in force afterwards (ms), or -1 when the key is forced.
//
// KEYS: state record, probe lease. ARGV: until ms, record, ttl ms,
// message, pod, channel.
var openScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[5] then redis.call('DEL', KEYS[2]) end
if cur then
  local ok, v = pcall(cjson.decode, cur)
  if ok and type(v) == 'table' then
    if v['mode'] == 'forced_open' or v['mode'] == 'forced_closed' then return -1 end
    local u = tonumber(v['until'])
    if v['mode'] == 'open' and u and u >= tonumber(ARGV[1]) then return u end
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[6], ARGV[4])
return tonumber(ARGV[1])
`)

// store is the Redis side: key names and the few commands the fleet needs.
type store struct {
	rdb     *redis.Client
	prefix  string
	pod     string
	timeout time.Duration
}

func (s *store) stateKey(key string) string { return s.prefix + ":state:" + key }
func (s *store) probeKey(key string) string { return s.prefix + ":probe:" + key }
func (s *store) channel() string            { return s.prefix + ":events" }

// ctx bounds one command: Redis must never hold up the event loop for long.
func (s *store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// open records and publishes open_until, returning the open_until the fleet
// now has (which may be later than ours) and whether the key is forced.
// The record outlives open_until by a margin so that a late joiner still
// sees a recent outage, then expires so a dead fleet leaves no litter.
func (s *store) open(key string, until time.Time, reset time.Duration, now time.Time) (time.Time, bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	ttl := max(until.Sub(now), 0) + reset + time.Minute
	rec := encode(record{Mode: modeOpen, Until: millis(until), Pod: s.pod})
	msg := encode(message{Op: opOpen, Key: key, Until: millis(until), Pod: s.pod})
	n, err := openScript.Run(ctx, s.rdb, []string{s.stateKey(key), s.probeKey(key)},
		millis(until), rec, ttl.Milliseconds(), msg, s.pod, s.channel()).Int64()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("record open %q: %w", key, err)
	}
	if n < 0 {
		return time.Time{}, true, nil
	}
	return fromMillis(n), false, nil
}

// close forgets the key's outage and lease and tells the fleet.
func (s *store) close(key string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.stateKey(key), s.probeKey(key))
	pipe.Publish(ctx, s.channel(), encode(message{Op: opClose, Key: key, Pod: s.pod}))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record close %q: %w", key, err)
	}
	return nil
}

// force records a manual mode (ModeAuto erases the record) and tells the
// fleet. Forced records never expire: an operator's decision stands until
// the operator changes it.
func (s *store) force(key string, m breakerstate.Mode) error {
	ctx, cancel := s.ctx()
	defer cancel()
	pipe := s.rdb.TxPipeline()
	if rec, ok := forcedRecord(m, s.pod); ok {
		pipe.Set(ctx, s.stateKey(key), encode(rec), 0)
	} else {
		pipe.Del(ctx, s.stateKey(key))
	}
	pipe.Del(ctx, s.probeKey(key))
	pipe.Publish(ctx, s.channel(), encode(message{Op: opForce, Key: key, Mode: m.String(), Pod: s.pod}))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record force %q: %w", key, err)
	}
	return nil
}

// lease tries to become the fleet's prober for key for ttl. When another
// process holds the lease it returns how long that lease still runs.
func (s *store) lease(key string, ttl time.Duration) (bool, time.Duration, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	ok, err := s.rdb.SetNX(ctx, s.probeKey(key), s.pod, ttl).Result()
	if err != nil {
		return false, 0, fmt.Errorf("probe lease %q: %w", key, err)
	}
	if ok {
		return true, ttl, nil
	}
	left, err := s.rdb.PTTL(ctx, s.probeKey(key)).Result()
	if err != nil {
		return false, 0, fmt.Errorf("probe lease ttl %q: %w", key, err)
	}
	return false, left, nil
}

// records reads the state records of keys in one round trip; a missing or
// unreadable record is absent from the result.
func (s *store) records(keys []string) (map[string]record, error) {
	out := make(map[string]record, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = s.stateKey(k)
	}
	vals, err := s.rdb.MGet(ctx, names...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read shared state: %w", err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		if r, err := decodeRecord([]byte(str)); err == nil {
			out[keys[i]] = r
		}
	}
	return out, nil
}

// ping checks that Redis answers within the timeout.
func (s *store) ping() error {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}
