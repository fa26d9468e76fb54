package dial

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/destination"
)

// TestDialerResolvesThenAppliesThePolicy: a [sidecar.resolve] name reaches
// the address it maps to (loopback, allowed because the configuration
// names it), while an unnamed name resolving to loopback is refused with
// the policy's sentinel before any connection is made.
func TestDialerResolvesThenAppliesThePolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	d := &Dialer{timeout: time.Second,
		resolve: map[string]string{"registry.test:" + port: ln.Addr().String()},
		policy:  destination.Policy{Named: map[string]bool{"registry.test:" + port: true}}}
	c, err := d.DialContext(context.Background(), "tcp", "Registry.Test.:"+port)
	if err != nil {
		t.Fatalf("dial of a resolved, named host: %v", err)
	}
	c.Close()
	<-accepted
	if _, err := d.DialContext(context.Background(), "tcp", "localhost:"+port); !errors.Is(err, destination.ErrForbidden) {
		t.Fatalf("dial of an unnamed loopback host = %v, want destination.ErrForbidden", err)
	}
	select {
	case <-accepted:
		t.Fatal("the refused dial reached the listener")
	default:
	}
}
