// Package clientconn holds the connections clients open to the proxy: the
// proxy port's listener with its connection limit, one connection type with
// the framing check and the one idle rule for every connection kind, and the
// small wrappers a hijacked connection is handed on in.
package clientconn
