package certs

import (
	"fmt"
	"strings"
)

// TrustInstructions returns the text `ca init` prints after creating a CA:
// how to make each supported client trust certPath, and that the clients must
// send their traffic through proxyURL. Interception only works when both
// halves are in place, so the text says so up front.
func TrustInstructions(certPath, proxyURL string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	p("Created the interception CA certificate %s.", certPath)
	p("Its private key must stay with nora-breaker: keep it mode 0600 and never copy it to clients.")
	p("")
	p("Every client that talks to a registry through nora-breaker needs two things:")
	p("  1. its traffic sent to the proxy:")
	p("       export HTTPS_PROXY=%s HTTP_PROXY=%s", proxyURL, proxyURL)
	p("     (add hosts that must bypass the proxy to NO_PROXY);")
	p("  2. the CA above added to the certificates it trusts, as below.")
	p("Without the CA, intercepted HTTPS fails with a certificate error; without the proxy")
	p("variables, the client goes straight to the registry and the breaker never sees it.")
	p("")
	p("NORA:")
	p("  NORA_TLS_CA_CERT=%s", certPath)
	p("")
	p("pip:")
	p("  PIP_CERT=%s   (or: pip install --cert %s ...)", certPath, certPath)
	p("  pip then trusts only this file, so downloads that bypass the proxy need a bundle as for Go below.")
	p("")
	p("npm / Node.js:")
	p("  NODE_EXTRA_CA_CERTS=%s   (adds to Node's built-in roots)", certPath)
	p("  or: npm config set cafile %s   (replaces them)", certPath)
	p("")
	p("Maven (Java):")
	p("  keytool -importcert -noprompt -alias nora-breaker -file %s \\", certPath)
	p("          -keystore nora-truststore.p12 -storetype PKCS12 -storepass changeit")
	p("  MAVEN_OPTS=\"-Djavax.net.ssl.trustStore=$PWD/nora-truststore.p12 -Djavax.net.ssl.trustStorePassword=changeit\"")
	p("  Java uses only that truststore, so import the JDK's cacerts into it too if Maven also")
	p("  reaches hosts that are not intercepted. Maven reads the proxy from settings.xml <proxies>")
	p("  or -Dhttps.proxyHost/-Dhttps.proxyPort rather than from HTTPS_PROXY.")
	p("")
	p("Go:")
	p("  SSL_CERT_FILE replaces the system roots instead of adding to them, so build a bundle:")
	p("  cat /etc/ssl/certs/ca-certificates.crt %s > nora-bundle.pem", certPath)
	p("  SSL_CERT_FILE=$PWD/nora-bundle.pem")
	p("")
	p("curl:")
	p("  curl --cacert %s ...   or   CURL_CA_BUNDLE=%s", certPath, certPath)
	p("  (both replace curl's default bundle; use the combined bundle from the Go step if needed)")
	p("")
	p("containerd / dockerd (pulls through the proxy):")
	p("  per registry host: copy %s to /etc/containerd/certs.d/<host>/ca.crt", certPath)
	p("                     or to /etc/docker/certs.d/<host>/ca.crt;")
	p("  or system-wide:    cp %s /usr/local/share/ca-certificates/nora-breaker.crt && update-ca-certificates", certPath)
	p("  then set HTTPS_PROXY/HTTP_PROXY in the daemon's environment (e.g. a systemd drop-in)")
	p("  and restart containerd or dockerd: they read proxies and certificates only at start.")
	return b.String()
}
