package coalesce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// fetch is a scripted fetch: each call of fn counts, waits for the gate,
// then answers with size bytes of pattern (announced unless chunked), fed
// through a source the test can hold back.
type fetch struct {
	size    int64
	chunked bool
	header  http.Header
	gate    chan struct{} // closed: answer; nil: answer at once
	// upTo is how far each body source gives bytes at first (-1: all).
	upTo  int64
	calls atomic.Int64
	// ctxs are the contexts fn ran under, in call order.
	mu   sync.Mutex
	ctxs []context.Context
	srcs []*source
}

func newFetch(size int64) *fetch {
	return &fetch{size: size, header: http.Header{"Content-Type": {"application/octet-stream"}}, gate: make(chan struct{}),
		upTo: -1}
}

func (f *fetch) fn(ctx context.Context) (*http.Response, string) {
	n := f.calls.Add(1)
	f.mu.Lock()
	f.ctxs = append(f.ctxs, ctx)
	f.mu.Unlock()
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return &http.Response{StatusCode: http.StatusBadGateway, Header: http.Header{}, Body: http.NoBody}, "gone"
		}
	}
	src := &source{ctx: ctx, left: f.size, hold: make(chan struct{}, 1)}
	src.release(f.upTo)
	f.mu.Lock()
	f.srcs = append(f.srcs, src)
	f.mu.Unlock()
	length := f.size
	if f.chunked {
		length = -1
	}
	return &http.Response{StatusCode: http.StatusOK, Header: f.header.Clone(), ContentLength: length, Body: src},
		"call " + strconv.FormatInt(n, 10)
}

// ctx is the context of the i-th call.
func (f *fetch) ctx(i int) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ctxs[i]
}

// src is the body source of the i-th call.
func (f *fetch) src(i int) *source {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.srcs[i]
}

// source is an upstream body: pattern bytes, given out up to a limit the
// test may hold back, that ends with the fetch's context like a transport
// body does.
type source struct {
	ctx context.Context
	mu  sync.Mutex // guards off, left, upTo
	off int64
	// left is how many bytes are still to come; upTo how far it may give
	// them (-1: no limit); hold wakes a Read waiting for more.
	left   int64
	upTo   int64
	hold   chan struct{}
	closed atomic.Bool
	ended  atomic.Bool // it gave its EOF
}

// release lets the source give bytes up to upTo (-1: all).
func (s *source) release(upTo int64) {
	s.mu.Lock()
	s.upTo = upTo
	s.mu.Unlock()
	select {
	case s.hold <- struct{}{}:
	default:
	}
}

func (s *source) Read(p []byte) (int, error) {
	for {
		if err := context.Cause(s.ctx); err != nil {
			return 0, err
		}
		if s.closed.Load() {
			return 0, io.ErrClosedPipe
		}
		s.mu.Lock()
		upTo, off, left := s.upTo, s.off, s.left
		s.mu.Unlock()
		if left == 0 {
			s.ended.Store(true)
			return 0, io.EOF
		}
		if upTo >= 0 && off >= upTo {
			select {
			case <-s.hold:
			case <-s.ctx.Done():
			}
			continue
		}
		// Only one Read runs at a time; the lock is for read().
		n := min(int64(len(p)), left)
		if upTo >= 0 {
			n = min(n, upTo-off)
		}
		s.mu.Lock()
		s.off += n
		s.left -= n
		s.mu.Unlock()
		for i := range n {
			p[i] = pattern(off + i)
		}
		return int(n), nil
	}
}

func (s *source) Close() error { s.closed.Store(true); return nil }

// read is how many bytes the source has given.
func (s *source) read() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.off
}

// pattern is the byte at offset i of every scripted body.
func pattern(i int64) byte { return byte(i*7 + i/251) }

// digestOf is the SHA-256 of size pattern bytes.
func digestOf(size int64) string {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		for i := range n {
			buf[i] = pattern(off + i)
		}
		h.Write(buf[:n])
		off += n
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readDigest reads r to its end and returns its SHA-256, the byte count
// and the error that ended it (nil at a clean EOF).
func readDigest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// newGroup is a group spooling in a test directory with a small bound.
func newGroup(t *testing.T, bound int64) (*Group[string], *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := New[string](Options{Dir: t.TempDir(), MaxBytes: bound, Registerer: reg, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

// coalesced reads the coalesced counter of label.
func coalesced(t *testing.T, g *Group[string], label string) int {
	t.Helper()
	return int(testutil.ToFloat64(g.m.coalesced.WithLabelValues(label)))
}

// call is a client's Call for key with its own context.
func call(ctx context.Context, key string, h http.Header) Call {
	if h == nil {
		h = http.Header{}
	}
	return Call{Key: key, Label: "maven", Ctx: ctx, Header: h}
}
