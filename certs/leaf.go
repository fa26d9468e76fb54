package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// ErrBadHost is returned for a CONNECT host no certificate can be cut for.
var ErrBadHost = errors.New("invalid host name for a leaf certificate")

// leafValidity is short on purpose: the store regenerates leaves daily by
// default, and a leaked leaf key should not stay useful for long.
const leafValidity = 7 * 24 * time.Hour

// ServerConfig is the TLS configuration an intercepted connection to host
// is served with. The leaf is cut for the CONNECT host (port stripped), not
// for the TLS SNI: the proxy decides to intercept on the CONNECT host, so
// that is the only name it may vouch for. Leaves come from store, generated
// with ca on a miss; store may be nil, in which case every handshake
// generates a fresh leaf.
//
// The leaf is fetched from GetCertificate, during the handshake, rather than
// up front: a generation error then reaches the client as a TLS alert
// instead of breaking a connection that already answered 200.
//
// allowH2 offers ALPN {"h2","http/1.1"} instead of {"http/1.1"}.
func ServerConfig(ca *tls.Certificate, store *Store, host string, allowH2 bool) (*tls.Config, error) {
	protos := []string{"http/1.1"}
	if allowH2 {
		protos = []string{"h2", "http/1.1"}
	}
	now := time.Now
	if store != nil {
		now = store.now
	}
	name, err := normalizeHost(host)
	if err != nil {
		return nil, err
	}
	gen := func() (*tls.Certificate, error) { return signLeaf(ca, name, now()) }
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if store == nil {
				return gen()
			}
			return store.Fetch(name, gen)
		},
	}, nil
}

// normalizeHost turns a CONNECT target ("Host:443", "[::1]:8443", "1.2.3.4")
// into the name a leaf is cut for and cached under: port and brackets
// removed, lower case, no trailing dot; IPs in canonical form. It rejects
// anything that is neither an IP without zone nor a plausible DNS name.
func normalizeHost(host string) (string, error) {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		if addr.Zone() != "" {
			return "", fmt.Errorf("%w: %q has an IPv6 zone", ErrBadHost, host)
		}
		return addr.Unmap().String(), nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if !validDNSName(h) {
		return "", fmt.Errorf("%w: %q", ErrBadHost, host)
	}
	return h, nil
}

// validDNSName accepts LDH labels (plus "_", which internal registries use)
// of 1-63 bytes and a total of at most 253 bytes. Wildcards are refused: a
// leaf names exactly the host the client asked for.
func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// signLeaf makes a leaf for host (already normalized) signed by ca. The key
// is a fresh ECDSA P-256 key from crypto/rand whatever the CA's key type:
// P-256 is cheap to generate and every registry client accepts it, and
// nothing about it derives from the CA or the host name.
func signLeaf(ca *tls.Certificate, host string, now time.Time) (*tls.Certificate, error) {
	if ca == nil || len(ca.Certificate) == 0 {
		return nil, errors.New("sign leaf: no CA certificate")
	}
	caCert := ca.Leaf
	if caCert == nil {
		var err error
		if caCert, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
			return nil, fmt.Errorf("sign leaf: parse CA: %w", err)
		}
	}
	caKey, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("sign leaf: CA key %T cannot sign", ca.PrivateKey)
	}
	notAfter := now.Add(leafValidity)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter // a leaf outliving its CA fails verification anyway
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("sign leaf: %w: CA expired on %s", ErrExpired, caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sign leaf: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("sign leaf: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host, Organization: []string{"nora-breaker interception"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{addr.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: parse: %w", host, err)
	}
	// The chain carries the CA too, as goproxy's own signer does; clients
	// that trust the CA ignore it, and it helps those that log the chain.
	chain := append([][]byte{der}, ca.Certificate...)
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// Warm cuts, in the background, the leaves of hosts that are sure to be
// intercepted (the configured upstreams' hosts), so the first client of
// each does not wait for a signature: a leaf that is cached already is left
// alone, and one is cut at a time. It returns at once.
func Warm(ca *tls.Certificate, store *Store, hosts []string) {
	if store == nil || len(hosts) == 0 {
		return
	}
	go func() {
		for _, h := range hosts {
			name, err := normalizeHost(h)
			if err != nil {
				continue
			}
			_, _ = store.Fetch(name, func() (*tls.Certificate, error) { return signLeaf(ca, name, store.now()) })
		}
	}()
}
