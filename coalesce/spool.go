package coalesce

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
)

// headBytes is how much of a shared body is kept in memory: all of a small
// answer (a packument, a manifest, a metadata file), which then never
// touches the disk, and for a large one the only memory it takes besides
// the copy buffer of the fetch.
const headBytes = 32 << 10

// errNoRoom ends a shared body whose length was not announced once it has
// outgrown the room the spools may take (room.reserve).
var errNoRoom = errors.New("coalesced body outgrew the room for its spool")

// spool keeps one shared body while it streams, for readers that each go at
// their own pace: the first bytes in memory, the rest in a temp file that
// was unlinked as soon as it was made (so a crash never leaves one behind,
// and the disk is freed when the last reader closes it). Whoever reads the
// upstream's body writes (upstream.go), one write at a time; every reader
// reads what has arrived with pread, never waiting for another reader, and
// waits only for bytes that have not arrived yet.
type spool struct {
	head []byte   // fixed length: the body's first bytes land here
	f    *os.File // the bytes after head; nil when the body fits head
	// limit is the most bytes the spool may hold as things stand, and grow
	// asks for more (nil: it may not grow). Both are the writer's alone,
	// but room.reserve reads limit under its own lock, which also guards
	// every change of it.
	limit int64
	grow  func(sp *spool, to int64) bool

	// n is how many bytes have been written; bytes below it never change.
	n atomic.Int64

	mu sync.Mutex // guards the fields below
	// end is nil while the body streams, io.EOF once it ended cleanly,
	// else why it broke off; readers see it once they have read all n.
	end     error
	trailer http.Header
	// grew is closed and replaced when n moves while a reader waits on it.
	grew    chan struct{}
	waiting bool
}

// newSpool makes the spool of a body of length want (-1: unknown). A body
// that fits in memory needs nothing more; for any other the spool has a
// temp file in dir and may hold nothing until room is reserved for it.
func newSpool(dir string, want int64) (*spool, error) {
	hl := int64(headBytes)
	if want >= 0 {
		hl = min(hl, want)
	}
	sp := &spool{head: make([]byte, hl), grew: make(chan struct{})}
	if want >= 0 && want <= hl {
		sp.limit = want
		return sp, nil
	}
	f, err := os.CreateTemp(dir, "nora-breaker-coalesce-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	sp.f = f
	return sp, nil
}

// write appends b; only whoever reads the upstream calls it, one call at a
// time. An error (the disk, or no room for a body of unannounced length)
// ends the body for every reader that has not read past what was written.
func (s *spool) write(b []byte) error {
	n := s.n.Load()
	total := n + int64(len(b))
	if total > s.limit && (s.grow == nil || !s.grow(s, total)) {
		return errNoRoom
	}
	rest := b
	if hl := int64(len(s.head)); n < hl {
		rest = b[copy(s.head[n:], b):]
	}
	if len(rest) > 0 {
		if s.f == nil {
			return errNoRoom // more than the announced length: never kept
		}
		if _, err := s.f.Write(rest); err != nil {
			return err
		}
	}
	s.n.Store(total)
	s.mu.Lock()
	if s.waiting {
		close(s.grew)
		s.grew, s.waiting = make(chan struct{}), false
	}
	s.mu.Unlock()
	return nil
}

// finish records how the body ended: err is io.EOF (or nil) for a clean
// end, and trailer the answer's trailer fields, which arrive after the
// body. Only the first end counts.
func (s *spool) finish(err error, trailer http.Header) {
	if err == nil {
		err = io.EOF
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end != nil {
		return
	}
	s.end, s.trailer = err, trailer
	close(s.grew)
}

// trailerCopy is a reader's own copy of the answer's trailer fields, once
// the body has ended.
func (s *spool) trailerCopy() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer.Clone()
}

// readAt reads into p the bytes from off that have arrived, waiting while
// none have; done is closed when the reader's client has gone, which ends
// the wait with errClientGone.
func (s *spool) readAt(p []byte, off int64, done <-chan struct{}) (int, error) {
	for {
		if n := s.n.Load(); off < n {
			return s.copyOut(p[:min(int64(len(p)), n-off)], off)
		}
		s.mu.Lock()
		if s.n.Load() > off {
			s.mu.Unlock()
			continue
		}
		if s.end != nil {
			err := s.end
			s.mu.Unlock()
			return 0, err
		}
		s.waiting = true
		grew := s.grew
		s.mu.Unlock()
		select {
		case <-grew:
		case <-done:
			return 0, errClientGone
		}
	}
}

// copyOut copies the bytes at off, all of which have arrived, into p.
func (s *spool) copyOut(p []byte, off int64) (int, error) {
	if hl := int64(len(s.head)); off < hl {
		return copy(p, s.head[off:]), nil
	} else if k, err := s.f.ReadAt(p, off-hl); k > 0 || err == nil {
		return k, nil
	} else {
		return 0, err
	}
}

// onDisk reports whether the spool has a temp file, and so takes room.
func (s *spool) onDisk() bool { return s.f != nil }

// close releases the temp file, once no reader and no writer needs it.
func (s *spool) close() {
	if s.f != nil {
		s.f.Close()
	}
}
