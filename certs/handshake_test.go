package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// serveTLS starts a TLS server on 127.0.0.1 that uses cfg, answers each
// connection with "ok" after the handshake, and returns its address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := conn.(*tls.Conn).Handshake(); err == nil {
					_, _ = io.WriteString(conn, "ok")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestHandshakeThroughServerConfig(t *testing.T) {
	ca := testCAAt(t, time.Now())
	tests := []struct {
		name       string
		connect    string // host goproxy hands to TLSConfig
		serverName string // what the client verifies
		allowH2    bool
		clientALPN []string
		wantProto  string
		wantErr    bool
	}{
		{name: "dns host", connect: "registry.npmjs.org:443", serverName: "registry.npmjs.org", wantProto: "http/1.1",
			clientALPN: []string{"h2", "http/1.1"}},
		{name: "h2 offered", connect: "registry.npmjs.org:443", serverName: "registry.npmjs.org", allowH2: true,
			clientALPN: []string{"h2", "http/1.1"}, wantProto: "h2"},
		{name: "ip host", connect: "127.0.0.1:443", serverName: "127.0.0.1", wantProto: ""},
		{name: "other name refused", connect: "registry.npmjs.org:443", serverName: "evil.example", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A real wall clock: the client verifies against time.Now.
			store := NewStore(StoreOptions{})
			cfg, err := ServerConfig(ca, store, tt.connect, tt.allowH2)
			if err != nil {
				t.Fatal(err)
			}
			addr := serveTLS(t, cfg)
			pool := x509.NewCertPool()
			pool.AddCert(ca.Leaf)
			dialer := &net.Dialer{Timeout: 5 * time.Second}
			conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{
				RootCAs: pool, ServerName: tt.serverName, NextProtos: tt.clientALPN,
			})
			if tt.wantErr {
				var hostErr x509.HostnameError
				if !errors.As(err, &hostErr) {
					t.Fatalf("err = %v, want a hostname verification error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			st := conn.ConnectionState()
			if st.NegotiatedProtocol != tt.wantProto {
				t.Errorf("ALPN = %q, want %q", st.NegotiatedProtocol, tt.wantProto)
			}
			if err := st.PeerCertificates[0].VerifyHostname(tt.serverName); err != nil {
				t.Error(err)
			}
			if body, err := io.ReadAll(conn); err != nil || string(body) != "ok" {
				t.Errorf("read = %q, %v", body, err)
			}
			if store.Len() != 1 {
				t.Errorf("store Len = %d, want 1", store.Len())
			}
		})
	}
}

func TestHandshakeUntrustedWithoutCA(t *testing.T) {
	cfg, err := ServerConfig(testCAAt(t, time.Now()), NewStore(StoreOptions{}), "pypi.org:443", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)
	// The client trusts a different CA only: the leaf must not verify.
	other := testCAAt(t, time.Now())
	pool := x509.NewCertPool()
	pool.AddCert(other.Leaf)
	_, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "pypi.org"})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("err = %v, want unknown authority", err)
	}
}
