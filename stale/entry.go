package stale

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// Entry is one stored answer, as returned by Find.
type Entry struct {
	// Status is the stored status code (200 for everything the proxy stores).
	Status int
	// Header is the stored headers (a copy the caller may change).
	Header http.Header
	// Body reads the stored body; the caller must Close it.
	Body io.ReadCloser
	// Size is the body's length in bytes.
	Size int64
	// HeadLength is, for the copy of a HEAD's answer, the Content-Length it
	// announced (its body is empty); 0 otherwise.
	HeadLength int64
	// StoredAt is when the upstream gave the answer.
	StoredAt time.Time
}

// Response builds the answer to serve for req from the entry: the stored
// status and headers, plus x-nora-stale: true so clients and operators can
// tell a stale copy, Age in whole seconds since StoredAt (RFC 9111 §5.1) and
// the stored length. A HEAD gets the headers only; the body file is closed.
// The returned Body owns e.Body.
func (e *Entry) Response(req *http.Request, now time.Time) *http.Response {
	h := e.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	age := max(int64(now.Sub(e.StoredAt)/time.Second), 0)
	h.Set("X-Nora-Stale", "true")
	h.Set("Age", strconv.FormatInt(age, 10))
	length := e.Size
	if e.HeadLength > 0 {
		length = e.HeadLength
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	h.Del("Transfer-Encoding")
	body := e.Body
	if req != nil && req.Method == http.MethodHead {
		if body != nil {
			body.Close()
		}
		body = http.NoBody
	}
	return &http.Response{
		Status:        strconv.Itoa(e.Status) + " " + http.StatusText(e.Status),
		StatusCode:    e.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          body,
		ContentLength: length,
		Request:       req,
	}
}
