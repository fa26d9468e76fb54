package certs

import (
	"strings"
	"testing"
)

func TestTrustInstructions(t *testing.T) {
	const cert = "/etc/nora-breaker/ca.pem"
	const proxy = "http://127.0.0.1:3128"
	text := TrustInstructions(cert, proxy)
	for _, want := range []string{
		"NORA_TLS_CA_CERT=" + cert,
		"PIP_CERT=" + cert, "--cert " + cert,
		"NODE_EXTRA_CA_CERTS=" + cert, "cafile " + cert,
		"keytool -importcert", "-file " + cert, "MAVEN_OPTS", "javax.net.ssl.trustStore",
		"SSL_CERT_FILE", "ca-certificates.crt " + cert,
		"--cacert " + cert, "CURL_CA_BUNDLE=" + cert,
		"/etc/containerd/certs.d/<host>/ca.crt", "/etc/docker/certs.d/<host>/ca.crt", "restart",
		"HTTPS_PROXY=" + proxy, "HTTP_PROXY=" + proxy,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("instructions lack %q", want)
		}
	}
}
