package relay

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// countingWriter counts writes and flushes.
type countingWriter struct {
	bytes.Buffer
	writes, flushes int
}

func (w *countingWriter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

// TestStreamBodyFlushesOnlyShortReads: a body that arrives a few bytes at
// a time is flushed after each piece; one that fills the buffer is not.
func TestStreamBodyFlushesOnlyShortReads(t *testing.T) {
	var w countingWriter
	buf := make([]byte, 8)
	n, rerr, werr := streamBody(&w, func() { w.flushes++ }, iotest.OneByteReader(strings.NewReader("abc")), buf)
	if n != 3 || rerr != nil || werr != nil || w.flushes != 3 {
		t.Fatalf("trickle: n=%d read=%v write=%v flushes=%d, want 3 bytes and 3 flushes", n, rerr, werr, w.flushes)
	}
	w = countingWriter{}
	n, _, _ = streamBody(&w, func() { w.flushes++ }, strings.NewReader(strings.Repeat("x", 16)), buf)
	if n != 16 || w.flushes != 0 {
		t.Fatalf("full buffers: n=%d flushes=%d, want 16 bytes and no flush", n, w.flushes)
	}
	_, rerr, _ = streamBody(&w, func() {}, iotest.ErrReader(io.ErrUnexpectedEOF), buf)
	if !errors.Is(rerr, io.ErrUnexpectedEOF) {
		t.Fatalf("a broken body's read error = %v", rerr)
	}
}

// TestAnswerAbortsABrokenBody: an upstream body that breaks off
// aborts the answer, so the client never takes a short body for a whole one.
func TestAnswerAbortsABrokenBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := io.MultiReader(strings.NewReader("part"), iotest.ErrReader(io.ErrUnexpectedEOF))
		Answer(w, r, &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: -1,
			Body: io.NopCloser(body)}, Options{Bufs: NewBuffers(), Idle: time.Minute})
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("the client read a whole body from an upstream that broke off")
	}
}

// TestTunnelPassesHalfCloses: each side's end of stream reaches the other
// while the opposite direction keeps flowing.
func TestTunnelPassesHalfCloses(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); accepted <- c }()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	}
	client, proxyClientSide := pair()
	proxyUpstreamSide, upstream := pair()
	done := make(chan struct{})
	go func() { Tunnel(proxyClientSide, proxyUpstreamSide, NewBuffers(), nil); close(done) }()
	_, _ = client.Write([]byte("request"))
	_ = client.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(upstream)
	if err != nil || string(got) != "request" {
		t.Fatalf("upstream read %q, %v; want the request then EOF", got, err)
	}
	_, _ = upstream.Write([]byte("answer"))
	_ = upstream.(*net.TCPConn).CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("client read %q, %v; want the answer then EOF", got, err)
	}
	<-done
}

// TestClientBodyClosedWhileRead: a transport may close a request body
// while its Read is under way (x/net's HTTP/2 transport does when the
// upstream's answer ends the upload early); the body's deadline bookkeeping
// must hold under -race, and once closed no Read moves the deadline again.
func TestClientBodyClosedWhileRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := WatchClientBody(w, r, time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 512)
			for {
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
		}()
		b.Close()
		<-done
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	for range 20 {
		pr, pw := io.Pipe()
		go func() {
			for range 64 {
				if _, err := pw.Write(make([]byte, 256)); err != nil {
					return
				}
			}
			pw.Close()
		}()
		resp, err := http.Post(srv.URL, "application/octet-stream", pr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		pr.Close()
	}
}

// TestClientBodyClosedAfterTheHandler: x/net's HTTP/2 transport may close
// a request body after the handler that read it has returned (from the
// goroutine that ends the upstream stream). The body must then leave the
// connection alone: an HTTP/2 stream's ResponseWriter is gone once its
// handler is done, and on main its read deadline was set through it, a nil
// dereference that took the whole process down (seen under -race).
func TestClientBodyClosedAfterTheHandler(t *testing.T) {
	bodies := make(chan *ClientBody, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := WatchClientBody(w, r, time.Second)
		defer b.Finish()
		buf := make([]byte, 16)
		_, _ = b.Read(buf) // moves the read deadline
		bodies <- b
		w.WriteHeader(http.StatusUnauthorized)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(make([]byte, 64)) }()
	resp, err := srv.Client().Post(srv.URL, "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("over %s, want HTTP/2", resp.Proto)
	}
	b := <-bodies
	// The handler has returned (its answer came); its stream may be gone.
	for range 50 {
		if err := b.Close(); err != nil && !errors.Is(err, http.ErrBodyReadAfterClose) {
			t.Logf("close: %v", err)
		}
	}
}
