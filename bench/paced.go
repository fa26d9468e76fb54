package main

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The coalesce section's upstream paths: ".../paced/<tag>/<bytes>" is served
// like an artifact from a registry over the internet, not over loopback:
// the headers come pacedFirstByte after the request, the body at most
// pacedRate bytes a second per connection. On loopback an unpaced body
// comes as fast as the client can read it, and 20 clients reading 50 MB
// each would measure this machine's copying, not what one fetch instead
// of twenty saves.
const (
	pacedMarker    = "/paced/"
	pacedFirstByte = 50 * time.Millisecond
	pacedRate      = 100e6
)

// pacedHits counts the requests of each paced path.
type pacedHits struct {
	mu sync.Mutex
	n  map[string]int64
}

func (h *pacedHits) add(path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int64{}
	}
	h.n[path]++
}

func (h *pacedHits) get(path string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[path]
}

// servePaced answers a paced path: cacheable for a minute (squid only
// collapses requests for an answer it may cache), its size from the last
// path element.
func (u *upstream) servePaced(w http.ResponseWriter, r *http.Request) {
	u.paced.add(r.URL.Path)
	size, err := strconv.Atoi(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
	if err != nil || size < 0 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	start := time.Now()
	time.Sleep(pacedFirstByte)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	w.Header().Set("Cache-Control", "public, max-age=60")
	w.Header().Set("Last-Modified", start.UTC().Add(-time.Hour).Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	flusher, _ := w.(http.Flusher)
	begun := time.Now()
	for sent := 0; sent < size; {
		n := min(size-sent, len(u.chunk))
		if _, err := w.Write(u.chunk[:n]); err != nil {
			return
		}
		sent += n
		if flusher != nil {
			flusher.Flush()
		}
		if due := begun.Add(time.Duration(float64(sent) / pacedRate * float64(time.Second))); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
}
