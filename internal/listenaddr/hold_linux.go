package listenaddr

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// Hold keeps a loopback TCP port bound, without listening on it, for as
// long as it is open. Unlike a listener that is closed before its port is
// handed on, it never lets the port go:
//   - the kernel hands the port to no one else: bind(":0") and the local
//     port of an outgoing connection both skip a port with a bound socket;
//   - a server told to listen on exactly that port can, provided it sets
//     SO_REUSEADDR as listeners do (Go, libuv, squid, tinyproxy, toxiproxy):
//     Linux lets a SO_REUSEADDR socket bind beside one that is not listening;
//   - while nothing listens, a connection to it is refused at once, and a
//     server may stop and listen there again as often as it likes.
//
// Use it only for servers that cannot bind port 0 themselves, or for a
// listener that must come back on the same port.
type Hold struct {
	fd   int
	port int
}

// NewHold binds a fresh loopback port and holds it.
func NewHold() (*Hold, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hold a port: %w", err)
	}
	h := &Hold{fd: fd}
	if err := h.bind(); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold a port: %w", err)
	}
	return h, nil
}

func (h *Hold) bind() error {
	if err := syscall.SetsockoptInt(h.fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := syscall.Bind(h.fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	sa, err := syscall.Getsockname(h.fd)
	if err != nil {
		return err
	}
	h.port = sa.(*syscall.SockaddrInet4).Port
	return nil
}

// Port is the held port.
func (h *Hold) Port() int { return h.port }

// Addr is "127.0.0.1:<port>".
func (h *Hold) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.port)) }

// Close lets the port go. Call it when whatever listens there has stopped
// for good; a second call does nothing (the descriptor number may already
// belong to another file).
func (h *Hold) Close() error {
	if h.fd < 0 {
		return nil
	}
	fd := h.fd
	h.fd = -1
	return syscall.Close(fd)
}
