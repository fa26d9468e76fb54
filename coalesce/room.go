package coalesce

import "sync"

// room decides how much disk the spools may take. Together they hold at
// most total bytes (stale_max_bytes), so a crowd of clients that read
// slowly, or not at all, cannot fill the temp directory's disk. One body
// up to bound (stale_max_object_bytes) needs only that; a larger one also
// needs the file system to keep at least as much free again as the body
// will take, once it and every other body granted room have been written:
// a fleet pulling a big image layer is worth the disk, a full disk is not.
type room struct {
	dir          string
	bound, total int64
	free         func(dir string) (int64, error)

	mu sync.Mutex
	// reserved is what the live spools may hold in all (their limits).
	reserved int64
	live     map[*spool]struct{}
}

func newRoom(dir string, bound, total int64, free func(string) (int64, error)) *room {
	return &room{dir: dir, bound: bound, total: total, free: free, live: map[*spool]struct{}{}}
}

// reserve reports whether sp may hold to bytes in all, and if so raises
// its limit to to. A spool that ends gives its room back with release.
func (r *room) reserve(sp *spool, to int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reserved+to-sp.limit > r.total {
		return false
	}
	if to > r.bound {
		free, err := r.free(r.dir)
		if err != nil {
			return false
		}
		var promised int64 // what the others may still write
		for o := range r.live {
			if o != sp {
				promised += max(o.limit-o.n.Load(), 0)
			}
		}
		if free-promised-(to-sp.n.Load()) < to {
			return false
		}
	}
	r.reserved += to - sp.limit
	sp.limit = to
	r.live[sp] = struct{}{}
	return true
}

// grown is the limit an unannounced body that needs need bytes asks for
// next: a bound's worth more at a time, so the room is asked once per bound
// written, not once per write.
func (r *room) grown(need int64) int64 {
	return (need/r.bound + 1) * r.bound
}

// release gives back what sp was granted, once its file is closed.
func (r *room) release(sp *spool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[sp]; ok {
		r.reserved -= sp.limit
		sp.limit = 0
		delete(r.live, sp)
	}
}
