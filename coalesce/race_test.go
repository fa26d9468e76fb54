package coalesce

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestManyRequestsOverManyKeys: 200 concurrent requests over 20 keys, some
// clients leaving early; run under -race. Every client that stays gets its
// key's whole body, nothing stays in flight, and no spool file is left.
func TestManyRequestsOverManyKeys(t *testing.T) {
	dir := t.TempDir()
	g, err := New[string](Options{Dir: dir, Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	sizes := make([]int64, 20)
	fetches := make([]*fetch, 20)
	for i := range fetches {
		sizes[i] = int64(i) * 37 << 10
		fetches[i] = newFetch(sizes[i])
		fetches[i].gate = nil
	}
	var wg sync.WaitGroup
	for i := range 200 {
		k := rand.IntN(20)
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out, err := g.Do(call(ctx, fmt.Sprint("key", k), nil), fetches[k].fn)
			if err != nil {
				t.Error(err)
				return
			}
			defer out.Resp.Body.Close()
			if i%10 == 0 {
				cancel() // a client that goes away mid-body
				return
			}
			if d, n, rerr := readDigest(out.Resp.Body); d != digestOf(sizes[k]) || rerr != nil {
				t.Errorf("key %d: %d bytes, %v", k, n, rerr)
			}
		})
	}
	wg.Wait()
	testkit.PollUntil(t, 5*time.Second, func() bool { return g.inFlight() == 0 })
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("%d spool files left in the directory", len(left))
	}
}
