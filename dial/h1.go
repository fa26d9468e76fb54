package dial

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1 carries plain-HTTP (http://) attempts over HTTP/1.1 on the calling
// goroutine: the request is written and the answer read by the goroutine
// that asked, instead of being handed to a connection's own read and write
// goroutines as net/http's Transport does. Each round trip saves two
// goroutine handoffs, which at thousands of requests a second are most of
// a proxy's CPU (issue 23). It takes the requests that make up a proxy's
// load, those without a body (GET, HEAD); an upload, whose answer may come
// while its body is still being written, or a protocol switch goes to
// net/http's Transport instead.
//
// Connections are kept per host, reused once an answer's body was read to
// its end, closed after idleTimeout unused, and bounded per host together
// with the connections being dialled (maxPerHost, 0: no bound). Nobody reads
// a kept connection while it is idle: one that received anything meanwhile
// is closed when it is taken again (idleCheck).
type h1 struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	maxPerHost  int
	idleTimeout time.Duration
	maxHeader   int64

	mu     sync.Mutex
	idle   map[string][]*h1Conn
	hosts  map[string]*hostSlots
	closed bool
}

// hostSlots bound one host's connections, dialling, busy and idle alike
// (conns, under h1.mu). A request that finds the bound reached waits for
// changed: closed and replaced whenever a connection is put back or goes
// away, so every waiter looks again.
type hostSlots struct {
	conns   int
	changed chan struct{}
}

// h1Conn is one kept connection.
type h1Conn struct {
	key   string
	conn  net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	limit *headerLimit
	slots *hostSlots
	t     *h1
	// idle closes the connection once it has been kept idleTimeout
	// unused (an upstream's own idle close would otherwise leave it
	// half-closed here until the host is asked again).
	idle *time.Timer
	// check finds out, when the connection is taken again, whether it
	// received anything while it was idle.
	check *idleCheck
	// kept: the connection carried an answer before, so a failure before
	// the next answer may be the connection's rather than the request's.
	kept bool
}

func newH1(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxPerHost int) *h1 {
	// Kept 30 s unused at most, against net/http's 90 s: a connection no
	// goroutine reads learns of the upstream's close (an idle timeout of
	// its own, a restart, a fault injector cutting it) only when it is
	// asked again, so until then its descriptor is held half-closed.
	return &h1{dial: dial, maxIdle: 256, maxPerHost: maxPerHost, idleTimeout: 30 * time.Second,
		maxHeader: 1 << 20, idle: map[string][]*h1Conn{}, hosts: map[string]*hostSlots{}}
}

// handles reports whether req goes the fast way: plain HTTP, no body, no
// protocol switch asked for.
func (t *h1) handles(req *http.Request) bool {
	return req.URL.Scheme == "http" && (req.Body == nil || req.Body == http.NoBody) &&
		!httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade")
}

// errReused marks a failure on a kept connection before the upstream's
// first answer line to the request: the upstream had closed the connection
// meanwhile, or bytes an earlier answer should not have had came in after
// the check that takes it (idleCheck) and were read as this answer. That
// is the connection's staleness, not the upstream's answer to this request,
// so a repeatable request is sent again on a new connection, whose outcome
// is the upstream's (net/http retries such requests too).
var errReused = errors.New("kept connection failed before an answer")

// RoundTrip sends req and returns the answer with its headers read; its body
// is read on the caller's goroutine too.
func (t *h1) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		// One pool and one bound per host, however the client spelled it.
		c, reused, err := t.get(req.Context(), keyOf(req))
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		c.close()
		if !reused || attempt > 0 || !errors.Is(err, errReused) || !repeatable(req) {
			return nil, err
		}
	}
}

// repeatable reports a request that may be sent again on a new connection
// when a kept one turns out closed: no body, a method safe to repeat.
func repeatable(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) &&
		(req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions)
}

// get returns a kept connection to host or dials one, within the host's
// bound.
func (t *h1) get(ctx context.Context, host string) (*h1Conn, bool, error) {
	addr := host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(host, "[]"), "80")
	}
	for {
		t.mu.Lock()
		if c := t.takeIdle(addr); c != nil {
			t.mu.Unlock()
			if c.check.unsolicited() {
				c.close()
				continue
			}
			return c, true, nil
		}
		slots := t.hosts[addr]
		if slots == nil {
			slots = &hostSlots{changed: make(chan struct{})}
			t.hosts[addr] = slots
		}
		if t.maxPerHost <= 0 || slots.conns < t.maxPerHost {
			slots.conns++
			t.mu.Unlock()
			return t.open(ctx, addr, slots)
		}
		changed := slots.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// takeIdle returns the newest kept connection to addr whose idle timer has
// not fired, closing one whose timer fired meanwhile (its expiry then finds
// it gone and leaves it be). The caller holds mu.
func (t *h1) takeIdle(addr string) *h1Conn {
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		c := list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		if c.idle.Stop() {
			return c
		}
		_ = c.conn.Close()
		c.conn = nil
		t.dropLocked(c.key, c.slots)
	}
	return nil
}

// expire closes c when it is still kept: its idle time ran out.
func (t *h1) expire(c *h1Conn) {
	t.mu.Lock()
	list := t.idle[c.key]
	i := slices.Index(list, c)
	if i < 0 {
		t.mu.Unlock()
		return // taken meanwhile
	}
	t.idle[c.key] = slices.Delete(list, i, i+1)
	_ = c.conn.Close()
	c.conn = nil
	t.dropLocked(c.key, c.slots)
	t.mu.Unlock()
}

// open dials a new connection to addr, whose place in the bound is taken.
func (t *h1) open(ctx context.Context, addr string, slots *hostSlots) (*h1Conn, bool, error) {
	conn, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		t.mu.Lock()
		t.dropLocked(addr, slots)
		t.mu.Unlock()
		return nil, false, err
	}
	limit := &headerLimit{r: conn}
	return &h1Conn{key: addr, conn: conn, br: bufio.NewReaderSize(limit, 16<<10), bw: bufio.NewWriterSize(conn, 16<<10),
		limit: limit, slots: slots, t: t, check: newIdleCheck(conn)}, false, nil
}

// dropLocked gives back one connection's place in its host's bound, wakes
// the requests waiting for one, and forgets a host with none left. The
// caller holds mu.
func (t *h1) dropLocked(addr string, s *hostSlots) {
	s.conns--
	t.wakeLocked(s)
	if s.conns == 0 && t.hosts[addr] == s && len(t.idle[addr]) == 0 {
		delete(t.hosts, addr)
		delete(t.idle, addr)
	}
}

// wakeLocked tells the requests waiting on s to look again.
func (t *h1) wakeLocked(s *hostSlots) {
	close(s.changed)
	s.changed = make(chan struct{})
}

// put keeps c for the next request to its host (the ones waiting are
// woken), or closes it.
func (t *h1) put(c *h1Conn) {
	t.mu.Lock()
	if t.closed || len(t.idle[c.key]) >= t.maxIdle {
		t.mu.Unlock()
		c.close()
		return
	}
	c.kept = true
	if c.idle == nil {
		c.idle = time.AfterFunc(t.idleTimeout, func() { t.expire(c) })
	} else {
		c.idle.Reset(t.idleTimeout)
	}
	t.idle[c.key] = append(t.idle[c.key], c)
	t.wakeLocked(c.slots)
	t.mu.Unlock()
}

// CloseIdleConnections closes every kept connection.
func (t *h1) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*h1Conn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.idle.Stop()
			c.close()
		}
	}
}

// retire closes every kept connection and keeps none from now on: the
// requests still using t close theirs when done (a reload replaced it).
func (t *h1) retire() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.CloseIdleConnections()
}

func (c *h1Conn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
		c.t.mu.Lock()
		c.t.dropLocked(c.key, c.slots)
		c.t.mu.Unlock()
	}
}

// roundTrip writes req on c and reads the answer's headers. Until the
// answer's body is done with, the request's context ending closes the
// connection: a wait for headers or a Read is unblocked, and the upstream
// stops sending (as net/http's Transport does on a cancel).
func (c *h1Conn) roundTrip(req *http.Request) (*http.Response, error) {
	conn := c.conn
	stop := context.AfterFunc(req.Context(), func() { _ = conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(c.classify(err))
	}
	if err := c.bw.Flush(); err != nil {
		return fail(c.classify(err))
	}
	c.limit.arm(c.t.maxHeader)
	var resp *http.Response
	for answered := false; ; answered = true {
		var err error
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			if c.kept && !answered {
				// An end, a reset, or a line that is no status line
				// (bytes left by an earlier answer): see errReused.
				err = fmt.Errorf("%w: %v", errReused, err)
			}
			return fail(err)
		}
		// 1xx informational answers (103 Early Hints) precede the real one;
		// a 101 is no such answer, but handles never lets one be asked.
		if resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		break
	}
	c.limit.disarm()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stop()
		_ = resp.Body.Close()
		return nil, errors.New("plain transport: upstream switched protocols")
	}
	reuse := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		// No body to wait for (HEAD, 204, 304, a length of 0): the
		// connection is free now.
		if stop() && reuse && c.br.Buffered() == 0 {
			c.t.put(c)
		} else {
			c.close()
		}
		return resp, nil
	}
	resp.Body = &h1Body{rc: resp.Body, c: c, stop: stop, reuse: reuse}
	return resp, nil
}

// classify is a write error of c: on a kept connection one the upstream had
// closed reads as errReused.
func (c *h1Conn) classify(err error) error {
	var op *net.OpError
	if c.kept && (errors.As(err, &op) || errors.Is(err, io.EOF)) {
		return fmt.Errorf("%w: %v", errReused, err)
	}
	return err
}

// h1Body is an answer's body: read to its end, the connection goes back for
// the next request; closed before, the connection is closed at once (the
// rest is never read: net/http's own body would drain it, keeping an
// upstream sending to a client that stopped reading). Close may come from
// another goroutine than Read's, and ends a Read in progress.
type h1Body struct {
	rc    io.ReadCloser
	c     *h1Conn
	stop  func() bool
	reuse bool
	once  sync.Once
	ended atomic.Bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.ended.Store(true)
		b.finish()
	}
	return n, err
}

func (b *h1Body) Close() error {
	if !b.ended.Load() {
		b.finish() // closes the connection: the rest is not wanted
	}
	err := b.rc.Close()
	b.finish()
	if !b.ended.Load() {
		return nil // the connection was cut on purpose
	}
	return err
}

func (b *h1Body) finish() {
	b.once.Do(func() {
		stopped := b.stop()
		if b.ended.Load() && b.reuse && stopped && b.c.br.Buffered() == 0 {
			b.c.t.put(b.c)
			return
		}
		b.c.close()
	})
}

// headerLimit bounds what an upstream may send before its answer's body:
// once armed, the reads through it may bring at most n bytes, until
// disarmed. A hostile upstream sending an endless header is cut off.
type headerLimit struct {
	r     io.Reader
	n     int64
	armed bool
}

func (l *headerLimit) arm(n int64) { l.n, l.armed = n, true }
func (l *headerLimit) disarm()     { l.armed = false }

var errHeaderTooLarge = errors.New("upstream answer headers too large")

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.armed {
		if l.n <= 0 {
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > l.n {
			p = p[:l.n]
		}
	}
	n, err := l.r.Read(p)
	if l.armed {
		l.n -= int64(n)
	}
	return n, err
}
