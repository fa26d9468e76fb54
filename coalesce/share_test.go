package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/rs/zerolog"
)

// TestVaryKeepsVariantsApart: an answer that varies by a header two
// waiting clients sent differently is not shared: the other client fetches
// for itself; a client that sent the same value shares it.
func TestVaryKeepsVariantsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		f := newFetch(1000)
		f.header.Set("Vary", "User-Agent")
		hdr := func(ua string) http.Header { return http.Header{"User-Agent": {ua}} }
		outs := make([]Outcome[string], 3)
		var wg sync.WaitGroup
		for i, ua := range []string{"npm/10", "npm/10", "yarn/1"} {
			wg.Go(func() {
				out, err := g.Do(call(context.Background(), "k", hdr(ua)), f.fn)
				if err != nil {
					t.Error(err)
					return
				}
				readDigest(out.Resp.Body)
				out.Resp.Body.Close()
				outs[i] = out
			})
			synctest.Wait() // in this order: the first client starts the fetch
		}
		close(f.gate)
		wg.Wait()
		if outs[0].Value != "call 1" || outs[1].Value != "call 1" || !outs[1].Joined {
			t.Errorf("same User-Agent: %q and %q (joined %v), want both the first fetch", outs[0].Value, outs[1].Value,
				outs[1].Joined)
		}
		if outs[2].Value != "call 2" || outs[2].Joined {
			t.Errorf("other User-Agent: %q, joined %v; want a fetch of its own", outs[2].Value, outs[2].Joined)
		}
	})
}

func TestSameVariant(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		name              string
		answer, asked, to http.Header
		same              bool
	}{
		{"no Vary", h(), h("Accept", "a"), h("Accept", "b"), true},
		{"same value", h("Vary", "Accept"), h("Accept", "a"), h("Accept", "a"), true},
		{"other value", h("Vary", "Accept"), h("Accept", "a"), h("Accept", "b"), false},
		{"absent in one", h("Vary", "Accept"), h("Accept", "a"), h(), false},
		{"absent in both", h("Vary", "Accept"), h(), h(), true},
		{"one line or two", h("Vary", "Accept"), h("Accept", "a, b"), h("Accept", "a", "Accept", "b"), true},
		{"listed, second differs", h("Vary", "Accept, User-Agent"), h("User-Agent", "x"), h("User-Agent", "y"), false},
		{"two Vary lines", h("Vary", "Accept", "Vary", "User-Agent"), h("User-Agent", "x"), h("User-Agent", "y"), false},
		{"star", h("Vary", "*"), h(), h(), false},
		{"case of the name", h("Vary", "accept"), h("Accept", "a"), h("Accept", "b"), false},
	} {
		if got := sameVariant(c.answer, c.asked, c.to); got != c.same {
			t.Errorf("%s: %v, want %v", c.name, got, c.same)
		}
	}
}

// TestLargeBodies: a body over the bound goes as it comes to a client
// alone; with a second client already waiting it is spooled when the file
// system has room for it, and otherwise goes to one client while the other
// fetches for itself.
func TestLargeBodies(t *testing.T) {
	const bound, size = 1 << 20, 3 << 20
	for _, c := range []struct {
		name    string
		clients int
		free    int64
		calls   int64
		spooled bool
	}{
		{"alone", 1, 1 << 40, 1, false},
		{"two, room", 2, 2*size + 1, 1, true},
		{"two, no room", 2, 2*size - 1, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, err := New[string](Options{Dir: t.TempDir(), MaxBytes: bound, Logger: zerolog.Nop(),
					free: func(string) (int64, error) { return c.free, nil }})
				if err != nil {
					t.Fatal(err)
				}
				f := newFetch(size)
				outs := make([]Outcome[string], c.clients)
				var wg sync.WaitGroup
				for i := range c.clients {
					wg.Go(func() {
						out, err := g.Do(call(context.Background(), "k", nil), f.fn)
						if err != nil {
							t.Error(err)
							return
						}
						outs[i] = out
						d, n, rerr := readDigest(out.Resp.Body)
						out.Resp.Body.Close()
						if d != digestOf(size) || rerr != nil {
							t.Errorf("client %d: %d bytes, %v", i, n, rerr)
						}
					})
				}
				synctest.Wait()
				close(f.gate)
				wg.Wait()
				if f.calls.Load() != c.calls {
					t.Errorf("calls %d, want %d", f.calls.Load(), c.calls)
				}
				_, spooled := outs[0].Resp.Body.(*spoolBody[string])
				if spooled != c.spooled {
					t.Errorf("spooled %v, want %v", spooled, c.spooled)
				}
			})
		})
	}
}

// TestUnannouncedBodies: a body without a length is spooled, and may grow
// past the bound while the file system has room; without room the body
// breaks off for the clients that share it where the spool ended (at most
// the bound), never silently short.
func TestUnannouncedBodies(t *testing.T) {
	const bound, size = 1 << 20, 3<<20 + 5
	for _, c := range []struct {
		name  string
		free  int64
		whole bool
	}{
		{"room", 1 << 40, true},
		{"no room", 1 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, err := New[string](Options{Dir: t.TempDir(), MaxBytes: bound, Logger: zerolog.Nop(),
					free: func(string) (int64, error) { return c.free, nil }})
				if err != nil {
					t.Fatal(err)
				}
				f := newFetch(size)
				f.chunked, f.upTo = true, 0
				wait := clients(g, f, "k", 3, nil)
				synctest.Wait()
				close(f.gate)
				synctest.Wait() // all three share the answer before a byte of it comes
				f.src(0).release(-1)
				for i, r := range wait() {
					switch {
					case c.whole && (r.digest != digestOf(size) || r.readE != nil):
						t.Errorf("client %d: %d bytes, %v", i, r.n, r.readE)
					case !c.whole && (!errors.Is(r.readE, errNoRoom) || r.n > bound || r.n < bound/2):
						t.Errorf("client %d: %d bytes, %v; want the body broken off by %d", i, r.n, r.readE, bound)
					}
				}
				if f.calls.Load() != 1 {
					t.Errorf("calls %d", f.calls.Load())
				}
			})
		})
	}
}

// TestAloneWithoutRoom: a client alone reading a body of unannounced
// length reads it whole when the spool cannot keep up with it; the spool
// just stops, and a client arriving after that fetches for itself.
func TestAloneWithoutRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound, size = 1 << 20, 3 << 20
		g, err := New[string](Options{Dir: t.TempDir(), MaxBytes: bound, Logger: zerolog.Nop(),
			free: func(string) (int64, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		f := newFetch(size)
		f.chunked, f.gate, f.upTo = true, nil, 2*bound
		first := clients(g, f, "k", 1, nil)
		synctest.Wait() // past the bound: the spool has stopped
		f.upTo = -1
		late := clients(g, f, "k", 1, nil)
		synctest.Wait()
		f.src(0).release(-1)
		for i, r := range append(first(), late()...) {
			if r.digest != digestOf(size) || r.readE != nil || r.out.Joined {
				t.Errorf("client %d: %d bytes, %v, joined %v", i, r.n, r.readE, r.out.Joined)
			}
		}
		if f.calls.Load() != 2 {
			t.Errorf("calls %d, want 2", f.calls.Load())
		}
	})
}

// TestPanickingFetch: a fetch that panics leaves its clients to fetch for
// themselves, where each one's own recovery applies.
func TestPanickingFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		f := newFetch(10)
		var once sync.Once
		fn := func(ctx context.Context) (*http.Response, string) {
			once.Do(func() { <-f.gate; panic("boom") })
			return f.fn(ctx)
		}
		wait := make(chan Outcome[string], 3)
		for range 3 {
			go func() {
				out, err := g.Do(call(context.Background(), "k", nil), fn)
				if err != nil {
					t.Error(err)
				}
				out.Resp.Body.Close()
				wait <- out
			}()
		}
		synctest.Wait()
		close(f.gate)
		for range 3 {
			if out := <-wait; out.Joined || out.Resp.StatusCode != http.StatusOK {
				t.Errorf("joined %v, status %d", out.Joined, out.Resp.StatusCode)
			}
		}
	})
}

// TestNoSpoolFile: when no spool file can be made, the answer goes to one
// client and the others fetch for themselves; a body that fits the memory
// head needs no file at all.
func TestNoSpoolFile(t *testing.T) {
	for _, c := range []struct {
		size  int64
		calls int64
	}{{headBytes, 1}, {headBytes + 1, 3}} {
		t.Run(fmt.Sprint(c.size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, err := New[string](Options{Dir: filepath.Join(t.TempDir(), "missing"), Logger: zerolog.Nop()})
				if err != nil {
					t.Fatal(err)
				}
				f := newFetch(c.size)
				wait := clients(g, f, "k", 3, nil)
				synctest.Wait()
				close(f.gate)
				for i, r := range wait() {
					if r.digest != digestOf(c.size) || r.readE != nil {
						t.Errorf("client %d: %d bytes, %v", i, r.n, r.readE)
					}
				}
				if f.calls.Load() != c.calls {
					t.Errorf("calls %d, want %d", f.calls.Load(), c.calls)
				}
			})
		})
	}
}

// TestTrailerReachesEveryClient: trailer fields, which arrive after the
// body, reach each client's answer when its body ends.
func TestTrailerReachesEveryClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		f := newFetch(100 << 10)
		fn := func(ctx context.Context) (*http.Response, string) {
			resp, v := f.fn(ctx)
			resp.Body = &trailing{source: resp.Body.(*source), resp: resp}
			return resp, v
		}
		outs := make(chan *http.Response, 2)
		for range 2 {
			go func() {
				out, err := g.Do(call(context.Background(), "k", nil), fn)
				if err != nil {
					t.Error(err)
					return
				}
				readDigest(out.Resp.Body)
				out.Resp.Body.Close()
				outs <- out.Resp
			}()
		}
		synctest.Wait()
		close(f.gate)
		for range 2 {
			if got := (<-outs).Trailer.Get("X-Checksum"); got != "abc" {
				t.Errorf("trailer %q", got)
			}
		}
	})
}

// TestSetCookieOnlyForTheLeader: the answer's Set-Cookie goes to the client
// whose request the fetch made, never to one that joined it, whether the
// answer is shared through a spool or (no spool file) goes to one client
// only, which may be one that joined.
func TestSetCookieOnlyForTheLeader(t *testing.T) {
	for _, dir := range []string{"spool", "missing"} {
		t.Run(dir, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				root := t.TempDir()
				if dir == "missing" {
					root = filepath.Join(root, "missing")
				}
				g, err := New[string](Options{Dir: root, Logger: zerolog.Nop()})
				if err != nil {
					t.Fatal(err)
				}
				f := newFetch(headBytes + 1)
				f.header["Set-Cookie"] = []string{"SESSION=1; Path=/"}
				f.header["Set-Cookie2"] = []string{"OLD=1"}
				wait := clients(g, f, "k", 3, nil)
				synctest.Wait()
				close(f.gate)
				joined := 0
				for i, r := range wait() {
					if r.err != nil || r.readE != nil || r.digest != digestOf(headBytes+1) {
						t.Fatalf("client %d: %v %v", i, r.err, r.readE)
					}
					h := r.out.Resp.Header
					has := h.Get("Set-Cookie") != "" || h.Get("Set-Cookie2") != ""
					if r.out.Joined {
						joined++
					}
					if has == r.out.Joined {
						t.Errorf("client %d (joined %v, %s): Set-Cookie %q, Set-Cookie2 %q", i, r.out.Joined, r.out.Value,
							h.Values("Set-Cookie"), h.Values("Set-Cookie2"))
					}
					if h.Get("Content-Type") == "" {
						t.Errorf("client %d lost the answer's other headers: %v", i, h)
					}
				}
				if dir == "spool" && joined != 2 {
					t.Errorf("%d clients joined, want 2", joined)
				}
			})
		})
	}
}

// trailing fills its answer's trailer at EOF, as net/http's transport does.
type trailing struct {
	*source
	resp *http.Response
}

func (b *trailing) Read(p []byte) (int, error) {
	n, err := b.source.Read(p)
	if err != nil {
		b.resp.Trailer = http.Header{"X-Checksum": {"abc"}}
	}
	return n, err
}

// TestAloneAtItsOwnPace: a client alone reads the upstream's body itself,
// so a client that stops reading holds the upstream back as it would
// without coalescing; once a second client joins, the fetch reads the rest
// at the upstream's pace, and both get the whole body.
func TestAloneAtItsOwnPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		const size = 8 << 20
		f := newFetch(size)
		f.gate = nil
		var first Outcome[string]
		go func() { first, _ = g.Do(call(context.Background(), "k", nil), f.fn) }()
		synctest.Wait()
		head := make([]byte, 100)
		if _, err := io.ReadFull(first.Resp.Body, head); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if off := f.src(0).read(); off > 64<<10 {
			t.Fatalf("the upstream was read %d bytes ahead of a client alone", off)
		}
		late := clients(g, f, "k", 1, nil)
		if r := late()[0]; r.digest != digestOf(size) || !r.out.Joined {
			t.Errorf("the client that joined: %d bytes, %v, joined %v", r.n, r.readE, r.out.Joined)
		}
		if !f.src(0).ended.Load() {
			t.Error("the fetch did not read on once a second client joined")
		}
		d, n, err := readDigest(io.MultiReader(bytes.NewReader(head), first.Resp.Body))
		first.Resp.Body.Close()
		if d != digestOf(size) || err != nil {
			t.Errorf("the first client: %d bytes, %v", n, err)
		}
	})
}

// TestTotalBound: the spools together hold at most TotalBytes; an answer
// that would take more goes to one client, and its others fetch for
// themselves.
func TestTotalBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := New[string](Options{Dir: t.TempDir(), TotalBytes: 1 << 20, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		a, b := newFetch(800<<10), newFetch(800<<10)
		a.upTo = 0 // a's spool stays reserved while b is settled
		waitA := clients(g, a, "a", 2, nil)
		waitB := clients(g, b, "b", 2, nil)
		synctest.Wait()
		close(a.gate)
		synctest.Wait()
		close(b.gate)
		synctest.Wait()
		a.src(0).release(-1)
		for i, r := range append(waitA(), waitB()...) {
			if r.digest != digestOf(800<<10) || r.readE != nil {
				t.Errorf("client %d: %d bytes, %v", i, r.n, r.readE)
			}
		}
		if a.calls.Load() != 1 || b.calls.Load() != 2 {
			t.Errorf("calls: a %d, b %d; want 1 and 2", a.calls.Load(), b.calls.Load())
		}
	})
}

// TestRoomCountsWhatOthersMayStillWrite: a large body is granted room only
// when the file system keeps as much free again after it and every other
// large body granted room have been written.
func TestRoomCountsWhatOthersMayStillWrite(t *testing.T) {
	const mib = 1 << 20
	r := newRoom("", mib, 1<<40, func(string) (int64, error) { return 20 * mib, nil })
	a, b := &spool{}, &spool{}
	if !r.reserve(a, 8*mib) {
		t.Fatal("8 MiB refused with 20 MiB free")
	}
	// a may still write 8 MiB: after both, 20 - 8 - 6 = 6 MiB stay free,
	// as much again as b's 6 MiB.
	if !r.reserve(b, 6*mib) {
		t.Error("6 MiB refused though 6 MiB stay free after both")
	}
	r.release(b)
	if r.reserve(b, 7*mib) {
		t.Error("7 MiB granted though only 5 MiB would stay free after both")
	}
	a.n.Store(8 * mib) // a has written all it may: the disk's free space already says so
	if !r.reserve(b, 6*mib) {
		t.Error("6 MiB refused once a's bytes are on disk")
	}
	if r.reserved != 14*mib {
		t.Errorf("reserved %d, want 14 MiB", r.reserved)
	}
}
