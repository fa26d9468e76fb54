package fallback

import (
	"bytes"
	"io"
)

// bytesBody is an io.ReadCloser over a fixed byte slice.
type bytesBody struct{ *bytes.Reader }

func newBytesBody(b []byte) io.ReadCloser { return bytesBody{bytes.NewReader(b)} }

func (bytesBody) Close() error { return nil }

// prefixedBody replays bytes already read from rc, then continues with rc,
// so a peeked body can still be streamed whole.
type prefixedBody struct {
	io.Reader
	rc io.Closer
}

func newPrefixedBody(prefix []byte, rc io.ReadCloser) io.ReadCloser {
	return prefixedBody{Reader: io.MultiReader(bytes.NewReader(prefix), rc), rc: rc}
}

func (p prefixedBody) Close() error { return p.rc.Close() }
