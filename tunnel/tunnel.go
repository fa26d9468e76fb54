// Package tunnel serves what follows an accepted CONNECT: the 200 on the
// raw connection, and for an intercepted host the TLS termination and the
// HTTP server of the requests inside, each handed back to the proxy's one
// request decision.
package tunnel

import (
	"fmt"
	"net"
	"net/http"
)

// Target is the CONNECT target an intercepted request came through: the
// lower-case host and the port. A request inside must name the same.
type Target struct {
	Host string
	Port string
}

// Addr is the target as "host:port".
func (t Target) Addr() string { return net.JoinHostPort(t.Host, t.Port) }

// Established is the CONNECT's 200 line in the client's HTTP version.
func Established(req *http.Request) string {
	major, minor := req.ProtoMajor, req.ProtoMinor
	if major == 0 {
		major, minor = 1, 1
	}
	return fmt.Sprintf("HTTP/%d.%d 200 Connection established\r\n\r\n", major, minor)
}

// Refuse writes resp as the CONNECT's answer on the raw connection, which
// ends with it.
func Refuse(client net.Conn, resp *http.Response) {
	resp.Header.Set("Connection", "close")
	resp.Close = true
	_ = resp.Write(client)
}
