package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// Body sizes the upstream serves: paths ending in "/big" get the large body,
// everything else the small one.
const (
	smallBody = 1 << 10
	bigBody   = 1 << 30
)

// benchDomain is the reserved name space (RFC 6761 .test) whose hosts the
// harness maps to 127.0.0.1 itself, in its client and through the proxy's
// [sidecar.resolve] table; nothing ever resolves it through DNS.
const benchDomain = "bench.test"

// upstream is the fake registry every target is measured against.
type upstream struct {
	small []byte
	chunk []byte
	// holes counts request heads that reached the black-holed listener.
	holes atomic.Int64
	// paced counts the requests of each paced path (coalesce.go).
	paced pacedHits
	// switched turns everything under /switched/ into a black hole: the
	// registry that worked a moment ago and now answers nothing (the
	// stale copies of the outage rows are kept while it still works).
	switched atomic.Bool
}

// runUpstream is the "upstream" subcommand: it serves until SIGTERM/SIGINT.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	httpAddr := fs.String("http", "127.0.0.1:0", "plain HTTP listener")
	httpsAddr := fs.String("https", "", "HTTPS listener (optional)")
	holeAddr := fs.String("blackhole", "", "listener that accepts and never answers (optional)")
	certOut := fs.String("cert-out", "", "write the HTTPS certificate (PEM, self-signed) here")
	addrFile := fs.String("addr-file", "", `once every listener is bound, write {"http":…,"https":…,"blackhole":…} here`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	u := &upstream{small: make([]byte, smallBody), chunk: make([]byte, 256<<10)}
	for i := range u.small {
		u.small[i] = 'a' + byte(i%26)
	}
	copy(u.chunk, u.small)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 3)
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("listen http: %w", err)
	}
	// The harness starts us on port 0 and reads the ports we got from
	// addrFile: it never reserves a port and hands it over.
	bound := map[string]string{"http": ln.Addr().String()}
	go func() { errc <- srv.Serve(ln) }()
	if *httpsAddr != "" {
		cert, err := selfSigned(*certOut)
		if err != nil {
			return err
		}
		tsrv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
		tln, err := net.Listen("tcp", *httpsAddr)
		if err != nil {
			return fmt.Errorf("listen https: %w", err)
		}
		bound["https"] = tln.Addr().String()
		go func() { errc <- tsrv.ServeTLS(tln, "", "") }()
		defer tsrv.Close()
	}
	if *holeAddr != "" {
		hln, err := net.Listen("tcp", *holeAddr)
		if err != nil {
			return fmt.Errorf("listen blackhole: %w", err)
		}
		defer hln.Close()
		bound["blackhole"] = hln.Addr().String()
		go u.blackhole(hln)
	}
	if *addrFile != "" {
		if err := listenaddr.WriteFile(*addrFile, bound); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return srv.Close()
}

// ServeHTTP answers every path with a generated body; /_bench/holes reports
// how many requests the black-holed listener has seen.
func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/_bench/holes":
		fmt.Fprintf(w, "%d\n", u.holes.Load())
		return
	case r.URL.Path == "/_bench/hits":
		fmt.Fprintf(w, "%d\n", u.paced.get(r.URL.Query().Get("path")))
		return
	case strings.Contains(r.URL.Path, pacedMarker):
		u.servePaced(w, r)
		return
	case r.URL.Path == "/_bench/switch":
		u.switched.Store(r.URL.Query().Get("hole") == "1")
		return
	case strings.HasPrefix(r.URL.Path, "/switched/") && u.switched.Load():
		u.holes.Add(1)
		<-r.Context().Done()
		return
	case strings.HasSuffix(r.URL.Path, "/big"):
		size := bigBody
		// ".../<N>/big" asks for N MiB instead (quick runs).
		parts := strings.Split(r.URL.Path, "/")
		if mib, err := strconv.Atoi(parts[len(parts)-2]); err == nil && mib > 0 {
			size = mib << 20
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		if r.Method == http.MethodHead {
			return
		}
		// The body is generated from one reused chunk, never stored.
		for left := size; left > 0; left -= len(u.chunk) {
			if _, err := w.Write(u.chunk[:min(left, len(u.chunk))]); err != nil {
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/java-archive")
	w.Header().Set("Content-Length", strconv.Itoa(len(u.small)))
	if r.Method != http.MethodHead {
		w.Write(u.small)
	}
}

// blackhole accepts connections, counts each request head it reads, and
// never answers: a registry that hangs after the TCP handshake.
func (u *upstream) blackhole(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				u.holes.Add(1)
				// Keep reading so a pipelined request is counted too; the
				// connection ends when the client gives up and closes it.
				io.Copy(io.Discard, req.Body)
			}
		}()
	}
}

// selfSigned makes an ECDSA certificate for the bench domain and loopback
// and writes it as PEM to certOut so clients and the proxy can trust it.
func selfSigned(certOut string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: benchDomain},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{benchDomain, "*." + benchDomain},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// A self-signed CA certificate can be put straight into a root pool.
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("upstream certificate: %w", err)
	}
	if certOut != "" {
		p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := os.WriteFile(certOut, p, 0o644); err != nil {
			return tls.Certificate{}, fmt.Errorf("write certificate: %w", err)
		}
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
