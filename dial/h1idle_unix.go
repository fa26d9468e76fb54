//go:build unix

package dial

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// idleCheck tells whether a kept connection, which nobody reads while it is
// idle, received anything since its last answer ended: bytes no request
// asked for (the body of a HEAD answer or a 204 sent anyway, bytes past a
// Content-Length), or the upstream's close. Either way the connection
// cannot carry another request: the bytes would be read as that request's
// answer. net/http finds this out with a goroutine reading every
// connection; here it is one recv with MSG_PEEK|MSG_DONTWAIT when the
// connection is taken again, which neither blocks nor takes the bytes. It
// is made once per connection, so the check allocates nothing.
type idleCheck struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool // bound once: a closure made per check would be allocated per check
	buf   [1]byte
	quiet bool
}

// newIdleCheck returns the check of conn, or nil for a connection that is
// no socket (a test's pipe): leftovers on one are found by the read of the
// next answer instead (errReused).
func newIdleCheck(conn net.Conn) *idleCheck {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	k := &idleCheck{rc: rc}
	k.peek = k.look
	return k
}

// unsolicited reports whether the connection received anything while idle.
func (k *idleCheck) unsolicited() bool {
	if k == nil {
		return false
	}
	k.quiet = false
	err := k.rc.Read(k.peek)
	return err != nil || !k.quiet
}

func (k *idleCheck) look(fd uintptr) bool {
	for {
		_, _, err := unix.Recvfrom(int(fd), k.buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		// Nothing to read is the one state of a healthy idle connection;
		// a byte, the end (0 bytes, no error) and a reset all mean it is
		// done with.
		k.quiet = err == unix.EAGAIN || err == unix.EWOULDBLOCK
		return true // never wait for the socket to become readable
	}
}
