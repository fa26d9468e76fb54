package dial

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
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

// TestLookupFailingOnThisMachineIsALocalFault: a name whose lookup fails
// because the resolver could not open its own socket (the process out of
// file descriptors) fails with the errno in its chain, so the attempt is
// this machine's fault (attempt.LocalFault) and not the upstream's; Go's
// resolver alone reduces it to text and the breaker counted it. A name
// server that refuses the connection answers nothing about the name
// either, and is as neutral (TestNameServerOutageIsNotTheUpstreams). No
// query leaves the process: the resolver's dial is the test's.
func TestLookupFailingOnThisMachineIsALocalFault(t *testing.T) {
	for _, c := range []struct {
		name  string
		errno syscall.Errno
		local bool
	}{
		{"out of descriptors", syscall.EMFILE, true},
		{"system out of descriptors", syscall.ENFILE, true},
		{"name server refusing", syscall.ECONNREFUSED, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked atomic.Int64
			d := &Dialer{timeout: time.Second, dnsDial: func(_ context.Context, network, server string) (net.Conn, error) {
				asked.Add(1)
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", c.errno)}
			}}
			_, dialErr := d.DialContext(context.Background(), "tcp", "registry.nora-breaker.test:443")
			_, lookupErr := d.addrsOf(context.Background(), "registry.nora-breaker.test", "443")
			if asked.Load() == 0 {
				t.Fatal("the resolver never dialled a name server")
			}
			for what, err := range map[string]error{"dial": dialErr, "lookup": lookupErr} {
				var dnsErr *net.DNSError
				if !errors.As(err, &dnsErr) || !strings.Contains(err.Error(), "lookup registry.nora-breaker.test on ") {
					t.Errorf("%s: %v, want the lookup's own error", what, err)
				}
				if !errors.Is(err, c.errno) || attempt.LocalFault(err) != c.local {
					t.Errorf("%s: %v: carries %v %v, local fault %v; want true, %v", what, err, c.errno,
						errors.Is(err, c.errno), attempt.LocalFault(err), c.local)
				}
			}
		})
	}
}
