package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// originHeader names the fake registry that answered, so the load can tell
// an upstream's own answer from one the proxy made up.
const originHeader = "X-Soak-Origin"

// fake is one loopback package registry of a format.
type fake struct {
	name   string
	format string
	srv    *http.Server
	addr   string // host:port it listens on
}

// startFake serves a minimal registry of format on 127.0.0.1. The server
// closes idle keep-alive connections after 2 s, so the proxy's pool drains
// soon after the load stops and resource checks see a quiet process.
func startFake(format, name string) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake %s: %w", name, err)
	}
	f := &fake{name: name, format: format, addr: ln.Addr().String()}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), IdleTimeout: 2 * time.Second,
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *fake) close() { _ = f.srv.Close() }

var jarBody = strings.Repeat("PK\x03\x04 soak artifact bytes ", 300) // ~8 KiB

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(originHeader, f.name)
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		return
	}
	if strings.Contains(r.URL.Path, "missing") {
		http.NotFound(w, r)
		return
	}
	switch f.format {
	case "docker":
		if r.URL.Path == "/v2/" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "{}")
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		_, _ = io.WriteString(w, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
			`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:`+
			strings.Repeat("a", 64)+`","size":2},"layers":[]}`)
	case "maven":
		w.Header().Set("Content-Type", "application/java-archive")
		_, _ = io.WriteString(w, jarBody)
	case "pypi":
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<!DOCTYPE html><html><body>`+
			`<a href="../../packages/soakpkg-1.0.tar.gz#sha256=`+strings.Repeat("b", 64)+`">soakpkg-1.0.tar.gz</a>`+
			`</body></html>`)
	case "npm":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"soakpkg","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":`+
			`{"name":"soakpkg","version":"1.0.0","dist":{"tarball":"http://`+r.Host+`/soakpkg/-/soakpkg-1.0.0.tgz"}}}}`)
	}
}

// target is one kind of request the load sends.
type target struct {
	format  string
	method  string
	url     string
	primary string // name of the fake the URL addresses
	missing bool
}

// paths of a format, relative to the upstream URL.
func artifactPath(format string, missing bool) string {
	name := "soakpkg"
	if missing {
		name = "missing-pkg"
	}
	switch format {
	case "docker":
		return "/v2/library/" + name + "/manifests/latest"
	case "maven":
		return "/org/soak/" + name + "/1.0/" + name + "-1.0.jar"
	case "pypi":
		return "/" + name + "/"
	default:
		return "/" + name
	}
}
