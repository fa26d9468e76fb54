package pypi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// A candidate index may send its page compressed (pip asks for gzip and
// deflate; nginx, devpi and Artifactory oblige). The page is decoded to be
// rewritten and encoded again the same way, so the client gets the encoding
// its own Accept-Encoding admitted, which is what the candidate chose for
// it. Only what the standard library reads is known; a page in any other
// coding (br, zstd) cannot be rewritten.

// contentCoding is one coding of a page's Content-Encoding, as the bytes
// turned out to be written.
type contentCoding int

const (
	codingGzip       contentCoding = iota
	codingZlib                     // "deflate" as RFC 9110 §8.4.1.2 defines it
	codingRawDeflate               // "deflate" as some servers send it: no zlib header
)

// errUnknownCoding reports a Content-Encoding the rewrite cannot read.
var errUnknownCoding = errors.New("pypi simple page in an unknown content coding")

// pageCodings parses h's Content-Encoding into the codings applied to the
// body, in the order they were applied ("identity" is none). "deflate" is
// taken as zlib until decode sees the bytes.
func pageCodings(h http.Header) ([]contentCoding, error) {
	var out []contentCoding
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			switch name := strings.ToLower(strings.TrimSpace(c)); name {
			case "", "identity":
			case "gzip", "x-gzip":
				out = append(out, codingGzip)
			case "deflate":
				out = append(out, codingZlib)
			default:
				return nil, fmt.Errorf("%w: %q", errUnknownCoding, name)
			}
		}
	}
	return out, nil
}

// decode undoes codings (last applied first) and returns the page, at most
// maxPyPIPage bytes once decoded, and the codings as the bytes showed them
// (a "deflate" without a zlib header is raw deflate). A page that decodes
// past the bound is errPageTooLarge; bytes that are not what they claim to
// be (a cut-off stream, a bad checksum, trailing garbage) are an error.
func decode(body []byte, codings []contentCoding) ([]byte, []contentCoding, error) {
	seen := append([]contentCoding(nil), codings...)
	for i := len(seen) - 1; i >= 0; i-- {
		var err error
		if body, seen[i], err = decodeOne(body, seen[i]); err != nil {
			return nil, nil, err
		}
	}
	return body, seen, nil
}

func decodeOne(body []byte, c contentCoding) ([]byte, contentCoding, error) {
	var r io.ReadCloser
	var err error
	switch c {
	case codingGzip:
		r, err = gzip.NewReader(bytes.NewReader(body))
	default:
		c = codingZlib
		if r, err = zlib.NewReader(bytes.NewReader(body)); errors.Is(err, zlib.ErrHeader) {
			c, r, err = codingRawDeflate, flate.NewReader(bytes.NewReader(body)), nil
		}
	}
	if err != nil {
		return nil, c, fmt.Errorf("decoding pypi simple page: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, maxPyPIPage+1))
	switch {
	case err != nil:
		return nil, c, fmt.Errorf("decoding pypi simple page: %w", err)
	case len(out) > maxPyPIPage:
		return nil, c, fmt.Errorf("%w: over %d bytes decoded", errPageTooLarge, maxPyPIPage)
	}
	return out, c, nil
}

// encode applies codings to page in order, as decode found them.
func encode(page []byte, codings []contentCoding) ([]byte, error) {
	for _, c := range codings {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch c {
		case codingGzip:
			w = gzip.NewWriter(&buf)
		case codingZlib:
			w = zlib.NewWriter(&buf)
		default:
			// Only an invalid level is an error, and this one is valid.
			w, _ = flate.NewWriter(&buf, flate.DefaultCompression)
		}
		if _, err := w.Write(page); err != nil {
			return nil, fmt.Errorf("encoding pypi simple page: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("encoding pypi simple page: %w", err)
		}
		page = buf.Bytes()
	}
	return page, nil
}
