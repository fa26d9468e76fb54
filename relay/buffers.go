package relay

import "sync"

// bufferSize is the size of the buffers bodies and tunnels are copied
// through.
const bufferSize = 32 << 10

// Buffers recycles copy buffers; without it every answer and every tunnel
// would allocate fresh 32 KiB buffers. Safe for concurrent use.
type Buffers struct{ pool sync.Pool }

// NewBuffers makes an empty pool.
func NewBuffers() *Buffers {
	return &Buffers{pool: sync.Pool{New: func() any { b := make([]byte, bufferSize); return &b }}}
}

func (b *Buffers) get() *[]byte  { return b.pool.Get().(*[]byte) }
func (b *Buffers) put(p *[]byte) { b.pool.Put(p) }
