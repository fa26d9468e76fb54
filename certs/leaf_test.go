package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "registry.npmjs.org:443", want: "registry.npmjs.org"},
		{in: "registry.npmjs.org", want: "registry.npmjs.org"},
		{in: "Files.PythonHosted.ORG.:443", want: "files.pythonhosted.org"},
		{in: "nexus_internal.corp:8443", want: "nexus_internal.corp"},
		{in: "localhost", want: "localhost"},
		{in: "10.0.0.7:443", want: "10.0.0.7"},
		{in: "10.0.0.7", want: "10.0.0.7"},
		{in: "[2001:DB8::1]:443", want: "2001:db8::1"},
		{in: "[::1]", want: "::1"},
		{in: "::1", want: "::1"},
		{in: "[::ffff:192.0.2.1]:443", want: "192.0.2.1"},
		{in: "", bad: true},
		{in: ":443", bad: true},
		{in: "a b.example:443", bad: true},
		{in: "*.example.com:443", bad: true},
		{in: "-bad.example", bad: true},
		{in: "bad-.example", bad: true},
		{in: "double..dot", bad: true},
		{in: "[fe80::1%eth0]:443", bad: true},
		{in: "evil.example\x00.good", bad: true},
		{in: "a/b:443", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := normalizeHost(tt.in)
			if tt.bad {
				if !errors.Is(err, ErrBadHost) {
					t.Fatalf("normalizeHost(%q) = %q, %v; want ErrBadHost", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("normalizeHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// leafFor runs ServerConfig for host and returns the certificate it serves.
func leafFor(t *testing.T, ca *tls.Certificate, s *Store, host string) *tls.Certificate {
	t.Helper()
	cfg, err := ServerConfig(ca, s, host, false)
	if err != nil {
		t.Fatalf("TLSConfig(%q): %v", host, err)
	}
	cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatalf("GetCertificate(%q): %v", host, err)
	}
	return cert
}

func TestLeafChainsAndNamesHost(t *testing.T) {
	ecCA := testCA(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCA, err := parseCA(selfSigned(t, rsaKey, nil), pkcs8PEM(t, rsaKey), "rsa.pem", "rsa-key.pem", t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ca      *tls.Certificate
		host    string
		wantDNS string
		wantIP  string
	}{
		{name: "dns with port", ca: ecCA, host: "registry.npmjs.org:443", wantDNS: "registry.npmjs.org"},
		{name: "dns without port", ca: ecCA, host: "pypi.org", wantDNS: "pypi.org"},
		{name: "ipv4", ca: ecCA, host: "10.1.2.3:443", wantIP: "10.1.2.3"},
		{name: "ipv6", ca: ecCA, host: "[2001:db8::5]:443", wantIP: "2001:db8::5"},
		{name: "rsa CA still gives P-256 leaf", ca: rsaCA, host: "repo1.maven.org:443", wantDNS: "repo1.maven.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(StoreOptions{Now: func() time.Time { return t0 }})
			cert := leafFor(t, tt.ca, s, tt.host)
			leaf := cert.Leaf
			if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("leaf key = %T, want ECDSA P-256", leaf.PublicKey)
			}
			if len(cert.Certificate) != 2 {
				t.Errorf("chain length = %d, want leaf + CA", len(cert.Certificate))
			}
			opts := x509.VerifyOptions{Roots: caPool(tt.ca), CurrentTime: t0, DNSName: tt.wantDNS + tt.wantIP}
			if _, err := leaf.Verify(opts); err != nil {
				t.Fatalf("leaf does not verify against the CA: %v", err)
			}
			if tt.wantDNS != "" && (len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != tt.wantDNS || len(leaf.IPAddresses) != 0) {
				t.Errorf("SAN = %v %v, want DNS %s", leaf.DNSNames, leaf.IPAddresses, tt.wantDNS)
			}
			if tt.wantIP != "" && (len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP(tt.wantIP)) || len(leaf.DNSNames) != 0) {
				t.Errorf("SAN = %v %v, want IP %s", leaf.DNSNames, leaf.IPAddresses, tt.wantIP)
			}
			if leaf.IsCA || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
				t.Errorf("leaf IsCA=%v EKU=%v", leaf.IsCA, leaf.ExtKeyUsage)
			}
			if !leaf.NotAfter.After(t0.Add(DefaultTTL)) || leaf.NotAfter.After(t0.Add(8*24*time.Hour)) {
				t.Errorf("leaf NotAfter = %v", leaf.NotAfter)
			}
			if cached := leafFor(t, tt.ca, s, tt.host); cached != cert {
				t.Error("second handshake did not reuse the cached leaf")
			}
		})
	}
}

// TestLeafKeysNotPredictable guards against CVE-2026-133185: a leaf key must
// not be derivable from the CA and the host name, so two stores (two proxy
// processes) with the same CA must produce different keys for one host.
func TestLeafKeysNotPredictable(t *testing.T) {
	ca := testCA(t)
	a := leafFor(t, ca, NewStore(StoreOptions{}), "registry.npmjs.org:443")
	b := leafFor(t, ca, NewStore(StoreOptions{}), "registry.npmjs.org:443")
	pa := a.PrivateKey.(*ecdsa.PrivateKey).PublicKey
	pb := b.PrivateKey.(*ecdsa.PrivateKey).PublicKey
	if pa.Equal(&pb) {
		t.Fatal("two stores produced the same leaf key for one host")
	}
	if a.Leaf.SerialNumber.Cmp(b.Leaf.SerialNumber) == 0 {
		t.Fatal("two leaves share a serial number")
	}
	if !a.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(&pa) {
		t.Fatal("leaf certificate does not carry its private key's public half")
	}
}

func TestLeafErrors(t *testing.T) {
	ca := testCA(t)
	if _, err := ServerConfig(ca, NewStore(StoreOptions{}), "bad host:443", false); !errors.Is(err, ErrBadHost) {
		t.Errorf("bad host: err = %v, want ErrBadHost", err)
	}
	// An expired CA fails during the handshake, so the client gets a TLS alert.
	late := NewStore(StoreOptions{Now: func() time.Time { return t0.Add(11 * 365 * 24 * time.Hour) }})
	cfg, err := ServerConfig(ca, late, "pypi.org:443", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.GetCertificate(&tls.ClientHelloInfo{}); !errors.Is(err, ErrExpired) {
		t.Errorf("expired CA: err = %v, want ErrExpired", err)
	}
	if late.Len() != 0 {
		t.Error("failed leaf was cached")
	}
	if _, err := signLeaf(&tls.Certificate{}, "x", t0); err == nil {
		t.Error("signLeaf without CA succeeded")
	}
}

func TestTLSConfigALPN(t *testing.T) {
	ca := testCA(t)
	for _, tt := range []struct {
		allowH2 bool
		want    []string
	}{{false, []string{"http/1.1"}}, {true, []string{"h2", "http/1.1"}}} {
		cfg, err := ServerConfig(ca, nil, "pypi.org:443", tt.allowH2)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.NextProtos) != len(tt.want) || cfg.NextProtos[0] != tt.want[0] {
			t.Errorf("allowH2=%v: NextProtos = %v, want %v", tt.allowH2, cfg.NextProtos, tt.want)
		}
		if cfg.MinVersion != tls.VersionTLS12 {
			t.Errorf("MinVersion = %x", cfg.MinVersion)
		}
	}
}

// FuzzNormalizeHost checks that any CONNECT host either is rejected or
// yields a stable name that x509 accepts and a client can verify.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"pypi.org:443", "[::1]:443", "10.0.0.1", "A.B.", "x_y", "[fe80::1%25lo]:1", "*.x", ""} {
		f.Add(s)
	}
	ca := testCA(f)
	pool := caPool(ca)
	f.Fuzz(func(t *testing.T, host string) {
		name, err := normalizeHost(host)
		if err != nil {
			return
		}
		if again, err := normalizeHost(name); err != nil || again != name {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", host, name, again, err)
		}
		leaf, err := signLeaf(ca, name, t0)
		if err != nil {
			t.Fatalf("signLeaf(%q): %v", name, err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, DNSName: name}); err != nil {
			t.Fatalf("leaf for %q does not verify: %v", name, err)
		}
	})
}

func BenchmarkLeafGeneration(b *testing.B) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	rsaCA, err := parseCA(selfSigned(b, rsaKey, nil), pkcs8PEM(b, rsaKey), "c", "k", t0)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		ca   *tls.Certificate
	}{{"ecdsa-ca", testCA(b)}, {"rsa2048-ca", rsaCA}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := signLeaf(bc.ca, "registry.example", t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
