package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// openScript records an open for a key on Redis's clock, unless the fleet
// already knows a later open_until or an operator forced the key,
// publishes it, and drops the caller's spent probe lease, all atomically.
// The caller sends durations, never a time of its own clock: open_until is
// Redis's TIME plus the caller's wait, so every process's opens are
// compared on one clock, and a later record stands only while it lies no
// further ahead than the caller would ever open for itself (a record that
// an older process with a skewed clock wrote is replaced). It returns the
// wait and the failed probes in force afterwards, or {-1, 0} when the key is
// forced.
//
// KEYS: state record, probe lease. ARGV: wait ms, failed probes, bound ms,
// key, pod, channel, record lifetime beyond open_until (ms).
var openScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = tonumber(ARGV[1])
local probes = tonumber(ARGV[2])
local untl = now + wait
if redis.call('GET', KEYS[2]) == ARGV[5] then redis.call('DEL', KEYS[2]) end
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, v = pcall(cjson.decode, cur)
  if ok and type(v) == 'table' then
    if v['mode'] == 'forced_open' or v['mode'] == 'forced_closed' then return {-1, 0} end
    local u = tonumber(v['until'])
    if v['mode'] == 'open' and u and u >= untl and u - now <= tonumber(ARGV[3]) then
      return {u - now, math.max(probes, math.floor(tonumber(v['probes']) or 0))}
    end
  end
end
redis.call('SET', KEYS[1], cjson.encode({mode = 'open', ['until'] = untl, probes = probes, pod = ARGV[5]}),
  'PX', wait + tonumber(ARGV[7]))
redis.call('PUBLISH', ARGV[6], cjson.encode({op = 'open', key = ARGV[4], ['in'] = wait, probes = probes,
  ['until'] = untl, pod = ARGV[5]}))
return {wait, probes}
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

// opened is the fleet's open period for a key after store.open.
type opened struct {
	wait   time.Duration // until the fleet's probe falls due
	probes int           // failed probes of the outage
	forced bool          // an operator forced the key: nothing was recorded
}

// open records and publishes an open whose probe falls due in wait, with
// probes failed probes; bound is the longest open period this process
// would choose (a stored one further ahead is replaced). It returns the
// fleet's period, which may end later than ours. The record outlives
// open_until by reset plus a minute so that a late joiner still sees a
// recent outage, then expires so a dead fleet leaves no litter.
func (s *store) open(key string, wait time.Duration, probes int, bound, reset time.Duration) (opened, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	keep := reset + time.Minute
	res, err := openScript.Run(ctx, s.rdb, []string{s.stateKey(key), s.probeKey(key)},
		max(wait, 0).Milliseconds(), probes, ceilMillis(bound), key, s.pod, s.channel(), keep.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("script returned %d values", len(res))
	}
	if err != nil {
		return opened{}, fmt.Errorf("record open %q: %w", key, err)
	}
	if res[0] < 0 {
		return opened{forced: true}, nil
	}
	return opened{wait: time.Duration(res[0]) * time.Millisecond, probes: int(res[1])}, nil
}

// ceilMillis is d in whole milliseconds, rounded up, so a bound is never
// made tighter by the wire's resolution.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// publish sends one message to the fleet.
func (s *store) publish(m message) error {
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.rdb.Publish(ctx, s.channel(), encode(m)).Err(); err != nil {
		return fmt.Errorf("publish %s %q: %w", m.Op, m.Key, err)
	}
	return nil
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

// records reads the state records of keys and Redis's clock in one round
// trip; a missing or unreadable record is absent from the result. The
// clock is what a record's open_until is compared with.
func (s *store) records(keys []string) (map[string]record, time.Time, error) {
	out := make(map[string]record, len(keys))
	if len(keys) == 0 {
		return out, time.Time{}, nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = s.stateKey(k)
	}
	pipe := s.rdb.Pipeline()
	clock := pipe.Time(ctx)
	get := pipe.MGet(ctx, names...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, time.Time{}, fmt.Errorf("read shared state: %w", err)
	}
	now, err := clock.Result()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read Redis's clock: %w", err)
	}
	for i, v := range get.Val() {
		str, ok := v.(string)
		if !ok {
			continue
		}
		if r, err := decodeRecord([]byte(str)); err == nil {
			out[keys[i]] = r
		}
	}
	// Round(0): a wall-clock value, compared with other wall-clock values.
	return out, now.Round(0), nil
}

// ping checks that Redis answers within the timeout.
func (s *store) ping() error {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}
