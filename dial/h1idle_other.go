//go:build !unix

package dial

import "net"

// idleCheck cannot look at a socket without reading it off Unix: a kept
// connection that received bytes nobody asked for is found out by the next
// request's read of its answer instead, which is then sent again on a new
// connection (errReused).
type idleCheck struct{}

func newIdleCheck(net.Conn) *idleCheck { return nil }

func (*idleCheck) unsolicited() bool { return false }
