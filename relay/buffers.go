package relay

import "sync"

// The sizes of the buffers bodies and tunnels are copied through. A body
// the upstream says is large (a jar, a wheel, an image layer) is copied
// through the large size: on loopback that streams about a fifth faster
// than the small one (fewer reads and writes, fewer wakeups of both
// peers), at 256 KiB held per such download in flight. Everything else —
// small answers, bodies of unknown length, tunnels, which may sit idle by
// the thousand — takes the small one.
const (
	smallBuffer = 32 << 10
	largeBuffer = 256 << 10
	// largeBody is the Content-Length from which an answer takes a large
	// buffer.
	largeBody = 1 << 20
)

// Buffers recycles copy buffers; without it every answer and every tunnel
// would allocate fresh ones. Safe for concurrent use.
type Buffers struct{ small, large sync.Pool }

// NewBuffers makes an empty pool.
func NewBuffers() *Buffers {
	return &Buffers{
		small: sync.Pool{New: func() any { b := make([]byte, smallBuffer); return &b }},
		large: sync.Pool{New: func() any { b := make([]byte, largeBuffer); return &b }},
	}
}

func (b *Buffers) get() *[]byte  { return b.small.Get().(*[]byte) }
func (b *Buffers) put(p *[]byte) { b.small.Put(p) }

// forBody is the buffer an answer of length n (-1: unknown) is copied
// through; hand it back with putBody.
func (b *Buffers) forBody(n int64) *[]byte {
	if n >= largeBody {
		return b.large.Get().(*[]byte)
	}
	return b.get()
}

func (b *Buffers) putBody(p *[]byte) {
	if len(*p) == largeBuffer {
		b.large.Put(p)
		return
	}
	b.put(p)
}
