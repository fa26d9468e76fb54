package main

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/nora-breaker/nora-breaker/certs"
)

// leafSigning is the p50 time to cut one leaf certificate, alone: the
// product's certs package with the run's CA and no store, so every
// handshake's GetCertificate signs a fresh leaf, exactly as the proxy does
// on a cache miss. It runs in the harness's own process, which is idle
// meanwhile; the interception rows' new-minus-repeat difference also
// contains a new upstream connection, and this row tells the two apart.
func leafSigning(e *env, hosts int) (float64, error) {
	ca, err := certs.Load(e.caCert, e.caKey, time.Now)
	if err != nil {
		return 0, fmt.Errorf("load the run's CA: %w", err)
	}
	var h histogram
	for i := range hosts {
		cfg, err := certs.ServerConfig(ca, nil, aliasHost(i), true)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if _, err := cfg.GetCertificate(&tls.ClientHelloInfo{ServerName: aliasHost(i)}); err != nil {
			return 0, fmt.Errorf("leaf for %s: %w", aliasHost(i), err)
		}
		h.record(time.Since(t0))
	}
	return h.quantile(0.5).Seconds(), nil
}
