package clientconn

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// FuzzFramingScan runs the scanner against net/http's own parser: when
// net/http, reading the same bytes the way the server does, reaches a
// request whose head carries both Content-Length and Transfer-Encoding, the
// scanner must have refused; when net/http reads every request cleanly and
// none has both, the scanner must not refuse. (When net/http gives up on the
// input first, the connection closes either way and both answers are fine.)
func FuzzFramingScan(f *testing.F) {
	f.Add([]byte("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n"))
	f.Add([]byte("POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nxyGET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("CONNECT a:443 HTTP/1.1\r\n\r\n\x16\x03\x01"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: foo\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\n" +
		"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n" +
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &framing{}
		// Feed in two pieces to exercise state carried across reads.
		half := len(data) / 2
		refused := !c.scan(data[:half]) || !c.scan(data[half:])
		if len(c.head) > maxScannedHead || len(c.line) > 4096 || c.remain < 0 {
			t.Fatalf("bounds broken: head %d line %d remain %d", len(c.head), len(c.line), c.remain)
		}
		conflict, decided := netHTTPConflict(data)
		switch {
		case decided && conflict && !refused:
			t.Fatalf("net/http reaches a request with both Content-Length and Transfer-Encoding; the scanner let it through")
		case decided && !conflict && refused:
			t.Fatalf("the scanner refused input net/http reads as clean requests")
		}
	})
}

// netHTTPConflict reads data as net/http's server does: request by request,
// each body to its end, giving up where the server would close the
// connection. conflict reports a request whose raw head has both
// Content-Length and Transfer-Encoding; decided is false when net/http gave
// up before reaching one (a parse or body error, a head cut off at the end,
// a request after which the server closes).
func netHTTPConflict(data []byte) (conflict, decided bool) {
	rd := bytes.NewReader(data)
	br := bufio.NewReaderSize(rd, 4096)
	lastMethod := ""
	for {
		if lastMethod == "POST" {
			// The server forgives up to four stray CR/LF after a POST.
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		if _, err := br.Peek(1); err == io.EOF {
			return false, true // every request read cleanly
		}
		offset := len(data) - rd.Len() - br.Buffered()
		raw := rawHeader(data[offset:])
		req, err := http.ReadRequest(br)
		if err != nil {
			return false, false
		}
		if !serverAccepts(req, raw["Host"]) {
			return false, false
		}
		_, rawCL := raw["Content-Length"]
		_, rawTE := raw["Transfer-Encoding"]
		if rawCL && rawTE {
			return true, true
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return false, false
		}
		if req.Close {
			return false, false // the server closes after answering
		}
		lastMethod = req.Method
	}
}

// rawHeader returns the header of the head at the start of b as net/http's
// header reader sees it, before ReadRequest drops Host and one of
// Content-Length and Transfer-Encoding.
func rawHeader(b []byte) textproto.MIMEHeader {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := tp.ReadLine(); err != nil {
		return nil
	}
	h, _ := tp.ReadMIMEHeader()
	return h
}

// serverAccepts repeats the checks net/http's server makes on a parsed
// request before serving it; a request failing them ends the connection.
func serverAccepts(req *http.Request, hosts []string) bool {
	h2Preface := req.Method == "PRI" && req.RequestURI == "*" && req.ProtoMajor == 2 && req.ProtoMinor == 0
	if req.ProtoMajor != 1 && !h2Preface {
		return false
	}
	ok := hosts != nil
	if req.ProtoAtLeast(1, 1) && (!ok || len(hosts) == 0) && !h2Preface && req.Method != "CONNECT" {
		return false
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
