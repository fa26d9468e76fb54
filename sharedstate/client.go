package sharedstate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Options configures New. Zero values are noted per field.
type Options struct {
	// URL is redis://[user:pass@]host:port[/db], rediss://… for TLS, or
	// unix://[user:pass@]/socket/path[?db=N]; required.
	URL string
	// Password, when not empty, replaces the URL's password (it comes from
	// NORA_SIDECAR_SHARED_STATE_PASSWORD, typically a Kubernetes secret).
	Password string
	// Prefix starts every Redis key and the channel name; "" means
	// "nora-breaker". Fleets sharing one Redis keep apart by prefix.
	Prefix string
	// RootCAs verifies a rediss:// server; nil means the system roots.
	RootCAs *x509.CertPool
	// Breakers is the set to share; required.
	Breakers *breakerstate.Set
	// Pod names this process in leases and messages; "" means the host
	// name plus a random suffix, so that two processes never share a name.
	Pod string
	// Timeout bounds every Redis command; 0 means 500ms.
	Timeout time.Duration
	// PingInterval is how often Redis is checked; 0 means 1s.
	PingInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Registerer receives nora_sidecar_shared_state_up; required.
	Registerer prometheus.Registerer
	// Logger receives connection changes and failed writes.
	Logger zerolog.Logger
}

// Client shares one breaker set's state through Redis. Its methods are safe
// for concurrent use.
type Client struct {
	set    *breakerstate.Set
	st     *store
	now    func() time.Time
	log    zerolog.Logger
	ping   time.Duration
	gauge  prometheus.Gauge
	events chan event
	// lost is set when a local event was dropped because the loop was
	// behind; the loop then resynchronises everything.
	lost   atomic.Bool
	up     atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New connects the set to the fleet and starts the background goroutines.
// It does not wait for Redis: an unreachable Redis at start is the same as
// one lost later (the set works alone until Redis answers).
func New(opts Options) (*Client, error) {
	if opts.Breakers == nil || opts.Registerer == nil {
		return nil, errors.New("sharedstate: Options.Breakers and Options.Registerer are required")
	}
	ro, err := redisOptions(opts)
	if err != nil {
		return nil, err
	}
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nora_sidecar_shared_state_up",
		Help: "1 while the fleet's shared breaker state (Redis) is reachable and subscribed, 0 while this process works alone.",
	})
	if err := opts.Registerer.Register(gauge); err != nil {
		return nil, fmt.Errorf("sharedstate: register metrics: %w", err)
	}
	c := &Client{set: opts.Breakers, now: opts.Now, log: opts.Logger.With().Str("component", "shared_state").Logger(),
		ping: opts.PingInterval, gauge: gauge, events: make(chan event, 1024)}
	if c.now == nil {
		c.now = time.Now
	}
	if c.ping <= 0 {
		c.ping = time.Second
	}
	c.st = &store{rdb: redis.NewClient(ro), prefix: opts.Prefix, pod: opts.Pod, timeout: opts.Timeout}
	if c.st.prefix == "" {
		c.st.prefix = "nora-breaker"
	}
	if c.st.timeout <= 0 {
		c.st.timeout = 500 * time.Millisecond
	}
	if c.st.pod == "" {
		c.st.pod = defaultPod()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.set.SetShare(&breakerstate.Share{Transition: c.onTransition, Forced: c.onForced,
		Failure: c.onFailure, Recovery: c.onRecovery})
	c.wg.Add(3)
	go func() { defer c.wg.Done(); c.loop(ctx) }()
	go func() { defer c.wg.Done(); c.receive(ctx) }()
	go func() { defer c.wg.Done(); c.pinger(ctx) }()
	return c, nil
}

// redisOptions turns Options into go-redis options with short timeouts and
// at most one retry: a command that still fails is redone by the next
// resync, never by making the loop wait.
func redisOptions(opts Options) (*redis.Options, error) {
	ro, err := redis.ParseURL(opts.URL)
	if err != nil {
		// go-redis errors may quote the URL; never repeat it (password).
		return nil, errors.New("sharedstate: shared_state is not a valid redis://, rediss:// or unix:// URL")
	}
	if opts.Password != "" {
		ro.Password = opts.Password
	}
	if ro.TLSConfig != nil {
		ro.TLSConfig.RootCAs = opts.RootCAs
		ro.TLSConfig.MinVersion = tls.VersionTLS12
	}
	ro.DialTimeout = time.Second
	ro.DialerRetries = 1
	ro.ReadTimeout = time.Second
	ro.WriteTimeout = time.Second
	// One retry: a pooled connection that broke while idle is the common
	// failure, and Timeout still bounds the whole command.
	ro.MaxRetries = 1
	ro.PoolSize = 4
	ro.PoolTimeout = time.Second
	ro.DisableIdentity = true
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return ro, nil
}

// defaultPod is the host name plus a random suffix.
func defaultPod() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Pod returns the name this process uses in leases and messages.
func (c *Client) Pod() string { return c.st.pod }

// Up reports whether Redis is reachable and subscribed, i.e. whether the
// set currently shares its state with the fleet.
func (c *Client) Up() bool { return c.up.Load() }

// Status is "up" or "down", for /health.
func (c *Client) Status() string {
	if c.Up() {
		return "up"
	}
	return "down"
}

// Close stops the goroutines, detaches the hooks (the set goes back to
// working alone) and closes the Redis connections.
func (c *Client) Close() error {
	var err error
	c.once.Do(func() {
		c.set.SetShare(nil)
		c.cancel()
		err = c.st.rdb.Close()
		c.wg.Wait()
	})
	return err
}
