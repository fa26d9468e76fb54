package format

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// A candidate may send a document a format rewrites compressed (pip asks
// for gzip and deflate, npm for gzip; nginx, devpi, Artifactory and the npm
// registry oblige). The document is decoded to be rewritten and encoded
// again the same way, so the client gets the encoding its own
// Accept-Encoding admitted, which is what the candidate chose for it. Only
// what the standard library reads is known; a document in any other coding
// (br, zstd) cannot be rewritten.

// Coding is one coding of a body's Content-Encoding, as the bytes turned
// out to be written.
type Coding int

const (
	codingGzip       Coding = iota
	codingZlib              // "deflate" as RFC 9110 §8.4.1.2 defines it
	codingRawDeflate        // "deflate" as some servers send it: no zlib header
)

// errTooLarge reports a body that decodes past the bound it was given.
var errTooLarge = errors.New("body too large to rewrite")

// errUnknownCoding reports a Content-Encoding a rewrite cannot read.
var errUnknownCoding = errors.New("body in an unknown content coding")

// BodyCodings parses h's Content-Encoding into the codings applied to the
// body, in the order they were applied ("identity" is none). "deflate" is
// taken as zlib until DecodeBody sees the bytes.
func BodyCodings(h http.Header) ([]Coding, error) {
	var out []Coding
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

// DecodeBody undoes codings (last applied first) and returns the body, at
// most max bytes once decoded, and the codings as the bytes showed them (a
// "deflate" without a zlib header is raw deflate). A body that decodes past
// max is an error, and so are bytes that are not what they claim to be (a
// cut-off stream, a bad checksum, trailing garbage).
func DecodeBody(body []byte, codings []Coding, max int) ([]byte, []Coding, error) {
	seen := append([]Coding(nil), codings...)
	for i := len(seen) - 1; i >= 0; i-- {
		var err error
		if body, seen[i], err = decodeOne(body, seen[i], max); err != nil {
			return nil, nil, err
		}
	}
	return body, seen, nil
}

func decodeOne(body []byte, c Coding, max int) ([]byte, Coding, error) {
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
		return nil, c, fmt.Errorf("decoding body: %w", err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	switch {
	case err != nil:
		return nil, c, fmt.Errorf("decoding body: %w", err)
	case len(out) > max:
		return nil, c, fmt.Errorf("%w: over %d bytes decoded", errTooLarge, max)
	}
	return out, c, nil
}

// EncodeBody applies codings to page in order, as DecodeBody found them.
func EncodeBody(page []byte, codings []Coding) ([]byte, error) {
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
			return nil, fmt.Errorf("encoding body: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("encoding body: %w", err)
		}
		page = buf.Bytes()
	}
	return page, nil
}

// RewriteBody buffers resp's body of up to max bytes (on the wire, and
// again once decoded), passes the decoded bytes to fn and encodes what fn
// returns again the way the body came. It reports whether the answer is
// right for the client now: a body fn leaves unchanged is, and keeps its
// bytes; a larger body, one that cannot be read whole, one in an unknown or
// broken coding, or one fn fails on is not, and streams on as it came.
// A rewritten answer loses the candidate's validator and body digests,
// which name bytes the client no longer gets.
func RewriteBody(resp *http.Response, max int, fn func(plain []byte) (out []byte, changed bool, err error)) bool {
	codings, err := BodyCodings(resp.Header)
	if err != nil || resp.ContentLength > int64(max) {
		return false
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
	if err != nil || len(raw) > max {
		resp.Body = NewPrefixedBody(raw, resp.Body)
		return false
	}
	resp.Body.Close()
	out, ok := rewritten(raw, codings, max, fn)
	if out == nil {
		out = raw
	} else {
		// An If-None-Match with the candidate's ETag must not make the
		// rewritten body pass for the candidate's own.
		for _, h := range []string{"Etag", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
			resp.Header.Del(h)
		}
	}
	resp.Body = NewBytesBody(out)
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
	return ok
}

// rewritten is raw (in codings) rewritten by fn and encoded again, nil when
// nothing changed; ok is false when it could not be read or rewritten.
func rewritten(raw []byte, codings []Coding, max int, fn func([]byte) ([]byte, bool, error)) (out []byte, ok bool) {
	plain, codings, err := DecodeBody(raw, codings, max)
	if err != nil {
		return nil, false
	}
	out, changed, err := fn(plain)
	if err != nil || !changed {
		return nil, err == nil
	}
	if out, err = EncodeBody(out, codings); err != nil {
		return nil, false
	}
	return out, true
}
