package format

import (
	"bytes"
	"io"
	"net/url"
)

// The bodies and URL helper below are shared by the loop and the formats,
// which all read or replace answers' bodies.

// bytesBody is an io.ReadCloser over a fixed byte slice.
type bytesBody struct{ *bytes.Reader }

// NewBytesBody is a body that gives b.
func NewBytesBody(b []byte) io.ReadCloser { return bytesBody{bytes.NewReader(b)} }

func (bytesBody) Close() error { return nil }

// prefixedBody replays bytes already read from rc, then continues with rc,
// so a peeked body can still be streamed whole.
type prefixedBody struct {
	io.Reader
	rc io.Closer
}

// NewPrefixedBody is a body that gives prefix, already read from rc, then
// the rest of rc; closing it closes rc.
func NewPrefixedBody(prefix []byte, rc io.ReadCloser) io.ReadCloser {
	return prefixedBody{Reader: io.MultiReader(bytes.NewReader(prefix), rc), rc: rc}
}

func (p prefixedBody) Close() error { return p.rc.Close() }

// DrainClose reads a little of an unwanted body so the connection can be
// reused, then closes it.
func DrainClose(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, 4<<10)
	rc.Close()
}

// WithoutUserinfo returns u without user:pass. url.ResolveReference copies
// the base's userinfo into relative references, which would hand a
// candidate's configured credentials to the client.
func WithoutUserinfo(u *url.URL) *url.URL {
	if u.User == nil {
		return u
	}
	c := *u
	c.User = nil
	return &c
}
