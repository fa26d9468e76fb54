// Package certs owns the interception CA: it creates one (`ca init`), loads
// one for serving with the key-permission and sanity checks an operator
// expects, and mints per-host leaf certificates through a bounded,
// single-flight cache that the intercepting TLS server draws them from.
//
// Leaves are always fresh ECDSA P-256 keys drawn from crypto/rand. The
// package deliberately does not use goproxy's internal signer: that signer
// derives each leaf key deterministically from the CA key and the host name
// (the root of CVE-2026-133185 in versions before v1.9.4), gives leaves a
// 395-day validity, and follows the CA's key type, which makes an RSA CA cost
// tens of milliseconds per new host.
package certs
