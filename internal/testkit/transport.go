package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// Transport carries requests to in-memory handlers by URL host
// ("a.test", "b.test:8080"), with what a client of a real server sees: the
// answer returns at its headers and its body streams while the handler
// writes; the handler's request context ends when the client gives up or
// closes the body; a handler that panics with http.ErrAbortHandler before
// its headers is a transport error, after them a broken body. A host with
// no handler does not resolve.
//
// It needs no socket, so a testing/synctest bubble can run a whole attempt,
// header timeouts included, on its fake clock.
type Transport map[string]http.Handler

// errAborted is what a client sees of a handler that hung up.
var errAborted = errors.New("testkit: connection closed by the upstream")

// RoundTrip serves req with its host's handler.
func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := t[req.URL.Host]
	if !ok {
		return nil, fmt.Errorf("testkit: dial %s: no such host", req.URL.Host)
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(req.Context())
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, head: req.Method == http.MethodHead,
		ready: make(chan struct{}), aborted: make(chan struct{})}
	go w.serve(h, serverRequest(ctx, req))
	select {
	case <-w.ready:
	case <-w.aborted:
		cancel()
		return nil, errAborted
	case <-req.Context().Done():
		if !closed(w.ready) {
			cancel()
			pr.Close()
			return nil, req.Context().Err()
		}
		// The headers were sent before the client gave up: like a client
		// that read them first, take them, and let the body fail.
	}
	resp := &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: w.sent,
		ContentLength: -1, Request: req}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = n
	}
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(context.Cause(ctx)) })
	resp.Body = &clientBody{pr: pr, close: func() { stop(); cancel(); pr.Close() }}
	if req.Method == http.MethodHead {
		resp.Body.Close()
		resp.Body = http.NoBody
	}
	return resp, nil
}

// closed reports whether ch is closed, without waiting.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// serverRequest is req as a handler receives it.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	sr := req.Clone(ctx)
	sr.RequestURI = req.URL.RequestURI()
	sr.Host = req.URL.Host
	sr.RemoteAddr = "127.0.0.1:1"
	sr.Proto, sr.ProtoMajor, sr.ProtoMinor = "HTTP/1.1", 1, 1
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	return sr
}

// pipeWriter is the handler's side: headers are taken when first written,
// the body goes through a pipe the client reads.
type pipeWriter struct {
	header  http.Header
	pw      *io.PipeWriter
	head    bool
	once    sync.Once
	ready   chan struct{} // closed when the headers are sent
	aborted chan struct{} // closed when the handler hung up before them
	status  int
	sent    http.Header
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.head {
		return len(p), nil
	}
	return w.pw.Write(p)
}

// Flush does nothing: every Write already reaches the client.
func (w *pipeWriter) Flush() {}

// serve runs the handler and ends the body the way a server would.
func (w *pipeWriter) serve(h http.Handler, r *http.Request) {
	defer func() {
		v := recover()
		switch {
		case v == nil && r.Context().Err() != nil && !closed(w.ready):
			// The client left before any answer; a server would find the
			// connection gone and send nothing.
			w.once.Do(func() { close(w.aborted) })
			w.pw.CloseWithError(errAborted)
		case v == nil:
			w.WriteHeader(http.StatusOK)
			w.pw.Close()
		case v == http.ErrAbortHandler:
			w.once.Do(func() { close(w.aborted) })
			w.pw.CloseWithError(errAborted)
		default:
			w.pw.CloseWithError(errAborted)
			panic(v)
		}
	}()
	h.ServeHTTP(w, r)
}

// clientBody is the answer's body as the client reads it.
type clientBody struct {
	pr    *io.PipeReader
	close func()
	done  sync.Once
}

func (b *clientBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *clientBody) Close() error {
	b.done.Do(b.close)
	return nil
}
