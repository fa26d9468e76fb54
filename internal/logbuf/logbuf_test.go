package logbuf

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type syncBuf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuf) snapshot() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// TestLinesArriveInBatchesAndInOrder: many goroutines' lines all arrive,
// each whole, in far fewer writes than lines.
func TestLinesArriveInBatchesAndInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &syncBuf{}
		w := New(out, 50*time.Millisecond)
		var wg sync.WaitGroup
		for g := range 20 {
			wg.Go(func() {
				for i := range 100 {
					w.Write([]byte(strings.Repeat(string(rune('a'+g)), 10) + "\n"))
					if i%10 == 0 {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		w.Close()
		text, writes := out.snapshot()
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		if len(lines) != 2000 {
			t.Fatalf("%d lines arrived, want 2000", len(lines))
		}
		for _, l := range lines {
			if len(l) != 10 || strings.Count(l, l[:1]) != 10 {
				t.Fatalf("a line arrived torn: %q", l)
			}
		}
		if writes > 200 {
			t.Fatalf("%d writes for 2000 lines: not batched", writes)
		}
	})
}

// blocked is an output that never returns from Write until released.
type blocked struct{ release chan struct{} }

func (b blocked) Write(p []byte) (int, error) { <-b.release; return len(p), nil }

// TestAStalledOutputNeverBlocksAWriter: with the output stuck, writes still
// return at once and what no longer fits is dropped and counted.
func TestAStalledOutputNeverBlocksAWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := blocked{release: make(chan struct{})}
		w := New(out, time.Millisecond)
		line := []byte(strings.Repeat("x", 1023) + "\n")
		start := time.Now()
		for range 20000 { // 20 MiB: more than the limit
			w.Write(line)
		}
		if time.Since(start) != 0 {
			t.Fatal("writes waited on a stalled output")
		}
		if w.Dropped() == 0 {
			t.Fatal("nothing was dropped with the output stalled past the limit")
		}
		close(out.release)
		w.Close()
	})
}
