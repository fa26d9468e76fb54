package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// keyFastFail is the breaker key forced open for the fast-fail figure: go has
// a single upstream, so every request gets the synthesized 503.
const keyFastFail = "go"

func (e *env) primaryKey() string { return "maven:http://" + loop(e.upHTTP) + "/primary" }

// URLs the scenarios request; all on the upstream process.
func (e *env) smallURL() string   { return "http://" + loop(e.upHTTP) + "/secondary/g/a/1/a-1.jar" }
func (e *env) primaryURL() string { return "http://" + loop(e.upHTTP) + "/primary/g/a/1/a-1.jar" }
func (e *env) fastFailURL() string {
	return "http://" + loop(e.upHTTP) + "/goproxy/example.com/m/@v/list"
}
func (e *env) holeURL() string { return "http://" + loop(e.upHole) + "/left-pad" }
func (e *env) tlsURL(host, path string) string {
	return fmt.Sprintf("https://%s:%d%s", host, e.upHTTPS, path)
}

// aliasHost is the i-th distinct host name that belongs to the HTTPS upstream.
func aliasHost(i int) string { return fmt.Sprintf("h%04d.%s", i, benchDomain) }

// noraConf is the nora-breaker configuration for one run:
//   - maven: primary and secondary on the upstream (fallback, closed path);
//   - go: a single upstream, forced open for the fast-fail figure;
//   - npm: the black-holed listener with proxy_timeout = 1 (outage cost),
//     or what the outage rows of issue 25 put there (noraExtra.npm);
//   - cargo: the HTTPS upstream, intercepted, with `aliases` extra host
//     names mapped to loopback through [sidecar.resolve].
func (e *env) noraConf(n *nora, aliases int) string {
	var b strings.Builder
	up := loop(e.upHTTP)
	npm := n.extra.npm
	// Early opening waits a third of proxy_timeout, as the product's
	// defaults do (suspect_after 10 s, NORA's proxy_timeout 30 s): the
	// default suspect_after of 10 s would never come before the bench's
	// 1 s proxy_timeout, and the outage rows would measure a proxy
	// configured as nobody runs it. The outage rows of issue 25 set their
	// own (outagefirst.go).
	breaker := n.extra.breaker
	if breaker == "" {
		breaker = fmt.Sprintf("suspect_after = %g\n", (outageTimeout / 3).Seconds())
	}
	if npm == "" {
		npm = fmt.Sprintf("proxy = \"http://%s\"\nproxy_timeout = %d\n", loop(e.upHole), int(outageTimeout/time.Second))
	}
	fmt.Fprintf(&b, `[circuit_breaker]
enabled = true
failure_threshold = 5
reset_timeout = 30
%[9]s
[registries]
enable = ["maven", "npm", "cargo", "go"]

[maven]
proxies = ["http://%[1]s/primary", "http://%[1]s/secondary"]
proxy_timeout = 30

[go]
proxy = "http://%[1]s/goproxy"

[npm]
%[8]s
[cargo]
proxy = "https://%[2]s:%[3]d"

[sidecar]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
ca_cert = %[4]q
ca_key = %[5]q
upstream_ca = %[6]q
max_connections = 8000
log_level = %[7]q
log_format = "json"
`, up, benchDomain, e.upHTTPS, e.caCert, e.caKey, e.upCertPath, e.opts.logLevel, npm, breaker)
	b.WriteString(n.extra.sidecar)
	hosts := make([]string, aliases)
	for i := range hosts {
		// An alias on another port than its scheme's default names it.
		hosts[i] = fmt.Sprintf("%q", fmt.Sprintf("%s:%d", aliasHost(i), e.upHTTPS))
	}
	fmt.Fprintf(&b, "\n[sidecar.aliases]\ncargo = [%s]\n", strings.Join(hosts, ", "))
	fmt.Fprintf(&b, "\n[sidecar.resolve]\n%q = %q\n", fmt.Sprintf("%s:%d", benchDomain, e.upHTTPS), loop(e.upHTTPS))
	for i := range aliases {
		fmt.Fprintf(&b, "%q = %q\n", fmt.Sprintf("%s:%d", aliasHost(i), e.upHTTPS), loop(e.upHTTPS))
	}
	b.WriteString(n.extra.tables)
	return b.String()
}

// tinyproxyConf: loopback only, own pid and log files, no upstream proxy.
func tinyproxyConf(dir string, port int) string {
	return fmt.Sprintf(`User nobody
Group nogroup
Port %d
Listen 127.0.0.1
Timeout 600
MaxClients 4096
PidFile %q
LogFile %q
LogLevel Critical
`, port, filepath.Join(dir, "tinyproxy.pid"), filepath.Join(dir, "tinyproxy.log"))
}

// squidConf: loopback only, no cache, no pinger, own pid and log files.
func squidConf(dir string, port int) string {
	return fmt.Sprintf(`http_port 127.0.0.1:%d
pid_filename %s
cache_log %s
access_log none
cache_store_log none
cache deny all
cache_mem 8 MB
http_access allow all
pinger_enable off
icp_port 0
htcp_port 0
coredump_dir %s
shutdown_lifetime 0 seconds
max_filedescriptors 16384
netdb_filename none
logfile_rotate 0
`, port, filepath.Join(dir, "squid.pid"), filepath.Join(dir, "squid-cache.log"), dir)
}
