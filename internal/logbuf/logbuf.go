// Package logbuf is the log's output: lines gathered in memory and written
// in batches by one goroutine, so a request never waits on (or pays a
// system call for) the log's file descriptor, and a log reader that stalls
// costs dropped lines, counted, never a stalled proxy.
package logbuf

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Writer gathers what is written to it and writes it to out every
// interval, or as soon as a batch is large, from one goroutine.
type Writer struct {
	out      io.Writer
	interval time.Duration
	batch    int // a pending batch this large is written at once
	limit    int // a pending batch this large drops new lines

	mu      sync.Mutex
	pending []byte
	spare   []byte // the buffer the last write emptied, reused
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	dropped atomic.Int64
}

// New starts a Writer on out. interval <= 0 means 50 ms.
func New(out io.Writer, interval time.Duration) *Writer {
	if interval <= 0 {
		interval = 50 * time.Millisecond
	}
	w := &Writer{out: out, interval: interval, batch: 64 << 10, limit: 8 << 20,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go w.run()
	return w
}

// Write queues p. It never blocks on out: when out has fallen behind by
// the limit, p is dropped and counted (Dropped).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if len(w.pending)+len(p) > w.limit {
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	w.pending = append(w.pending, p...)
	full := len(w.pending) >= w.batch
	w.mu.Unlock()
	if full {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Dropped is how many lines were dropped because out fell behind.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Close writes what is pending and stops the goroutine.
func (w *Writer) Close() error {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
	return nil
}

func (w *Writer) run() {
	defer close(w.stopped)
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.wake:
		case <-w.done:
			w.flush()
			return
		}
		w.flush()
	}
}

// flush writes the pending batch; the writing happens outside the lock, so
// requests go on queueing meanwhile.
func (w *Writer) flush() {
	w.mu.Lock()
	b := w.pending
	w.pending, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	if len(b) == 0 {
		w.mu.Lock()
		w.spare = b
		w.mu.Unlock()
		return
	}
	_, _ = w.out.Write(b)
	w.mu.Lock()
	if cap(b) <= 1<<20 { // keep a buffer of a sane size for the next batch
		w.spare = b[:0]
	}
	w.mu.Unlock()
}
