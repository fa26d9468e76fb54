package main

import (
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// env is everything the scenarios share: the work folder, the built proxy,
// the upstream process and the peer proxies.
type env struct {
	dir     string
	noraBin string
	self    string
	opts    options

	up                        *proc
	upHTTP, upHTTPS, upHole   int
	upCertPath, caCert, caKey string
	upRoots, caRoots          *x509.CertPool

	peers []peer
	procs []*proc
	// holds keep the ports of peers that cannot bind port 0 themselves
	// (squid, tinyproxy) until the peers have stopped.
	holds []*listenaddr.Hold
}

// peer is a running peer proxy (tinyproxy, squid).
type peer struct {
	name string
	url  string
	proc *proc
}

// setup builds nora-breaker, makes its CA, and starts the upstream and the
// peer proxies.
func setup(o options) (*env, error) {
	dir, err := os.MkdirTemp("", "nora-bench-")
	if err != nil {
		return nil, err
	}
	// Peer proxies drop root privileges and still write pid and log files here.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	e := &env{dir: dir, opts: o, noraBin: filepath.Join(dir, "nora-breaker")}
	if e.self, err = os.Executable(); err != nil {
		return nil, err
	}
	build := exec.Command("go", "build", "-o", e.noraBin, ".")
	build.Dir, build.Stdout, build.Stderr = o.repo, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build nora-breaker in %s: %w", o.repo, err)
	}
	caDir := filepath.Join(dir, "ca")
	if out, err := exec.Command(e.noraBin, "ca", "init", "--out", caDir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nora-breaker ca init: %w: %s", err, out)
	}
	e.caCert, e.caKey = filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem")
	if e.caRoots, err = poolFrom(e.caCert); err != nil {
		return nil, err
	}
	if err := e.startUpstream(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.startPeers(); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// startUpstream starts the upstream process on port 0 for each of its
// listeners and reads the ports it got from its address file.
func (e *env) startUpstream() error {
	e.upCertPath = filepath.Join(e.dir, "upstream.pem")
	var (
		bound map[string]string
		err   error
	)
	e.up, bound, err = e.startSelf("upstream", "upstream",
		"--http", "127.0.0.1:0", "--https", "127.0.0.1:0", "--blackhole", "127.0.0.1:0", "--cert-out", e.upCertPath)
	if err != nil {
		return err
	}
	for name, port := range map[string]*int{"http": &e.upHTTP, "https": &e.upHTTPS, "blackhole": &e.upHole} {
		if *port, err = portOf(bound[name]); err != nil {
			return fmt.Errorf("upstream %s listener: %w", name, err)
		}
	}
	e.upRoots, err = poolFrom(e.upCertPath)
	return err
}

// startSelf starts the bench binary in one of its server modes (tag names
// its log and address files) and returns the addresses it reports having
// bound: every server mode binds port 0 and writes them to --addr-file.
func (e *env) startSelf(tag, mode string, args ...string) (*proc, map[string]string, error) {
	addrFile := filepath.Join(e.dir, tag+".addrs.json")
	p, err := startProc(tag, filepath.Join(e.dir, tag+".log"), e.self,
		append(append([]string{mode}, args...), "--addr-file", addrFile)...)
	if err != nil {
		return nil, nil, err
	}
	e.procs = append(e.procs, p)
	bound, err := listenaddr.WaitFile(addrFile, p.pid(), 10*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w (see %s)", tag, err, p.log.Name())
	}
	return p, bound, nil
}

// stopProc stops one process before the run ends and forgets it.
func (e *env) stopProc(p *proc) {
	p.stop()
	for i, q := range e.procs {
		if q == p {
			e.procs = append(e.procs[:i], e.procs[i+1:]...)
			break
		}
	}
}

// startPeers starts tinyproxy and squid when installed; a missing one is
// skipped in --quick runs and is an error otherwise.
func (e *env) startPeers() error {
	for _, name := range []string{"tinyproxy", "squid"} {
		if e.opts.noPeers {
			continue
		}
		bin, err := findPeer(name)
		if err != nil {
			if e.opts.quick {
				fmt.Fprintf(os.Stderr, "bench: %s not installed, skipped (bash bench/setup.sh installs it)\n", name)
				continue
			}
			return fmt.Errorf("%s not installed: run bash bench/setup.sh, or pass --no-peers", name)
		}
		// squid and tinyproxy refuse port 0: each gets a port a Hold keeps
		// bound (never released before the peer listens on it).
		hold, err := listenaddr.NewHold()
		if err != nil {
			return err
		}
		e.holds = append(e.holds, hold)
		p, err := e.startPeer(name, bin, hold.Port())
		if err != nil {
			return err
		}
		e.peers = append(e.peers, peer{name: name, url: "http://" + hold.Addr(), proc: p})
	}
	return nil
}

// findPeer is the path of a peer proxy's binary: on PATH, or where Debian
// puts it (/usr/sbin is not on every user's PATH).
func findPeer(name string) (string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		for _, d := range []string{"/usr/sbin/", "/usr/bin/"} {
			if _, serr := os.Stat(d + name); serr == nil {
				bin, err = d+name, nil
			}
		}
	}
	return bin, err
}

func (e *env) startPeer(name, bin string, port int) (*proc, error) {
	conf := filepath.Join(e.dir, name+".conf")
	var text string
	var args []string
	switch name {
	case "tinyproxy":
		text, args = tinyproxyConf(e.dir, port), []string{"-d", "-c", conf}
	case "squid":
		text, args = squidConf(e.dir, port), []string{"-N", "-f", conf}
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	p, err := startProc(name, filepath.Join(e.dir, name+".out"), bin, args...)
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, p)
	if err := waitListening(p, "tcp", loop(port), 30*time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// close stops every process the harness started, newest first, by PID.
func (e *env) close() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].stop()
	}
	e.procs = nil
	for _, h := range e.holds {
		_ = h.Close()
	}
	e.holds = nil
	if !e.opts.keep {
		os.RemoveAll(e.dir)
	}
}

// nora is one running nora-breaker.
type nora struct {
	proc          *proc
	listen, admin string
	// extra is configuration the generic one lacks (the fleet rows add
	// shared state and a shorter reset_timeout).
	extra noraExtra
}

// noraExtra is added to the generated configuration: breaker lines go at
// the end of [circuit_breaker], sidecar lines at the end of [sidecar],
// tables at the end of the file; npm, when set, is the body of the [npm]
// table instead of the black-holed single upstream.
type noraExtra struct{ breaker, sidecar, tables, npm string }

func (n *nora) url() string { return "http://" + n.listen }

// startNora writes a fresh configuration (aliases extra host names for the
// HTTPS upstream) and starts nora-breaker with it on fresh ports.
func (e *env) startNora(tag string, aliases int) (*nora, error) {
	return e.startNoraWith(tag, aliases, noraExtra{})
}

// startNoraWith is startNora with extra configuration. The proxy binds port
// 0 for both listeners and names what it got in its address file.
func (e *env) startNoraWith(tag string, aliases int, extra noraExtra) (*nora, error) {
	n := &nora{extra: extra}
	conf := filepath.Join(e.dir, "nora-"+tag+".toml")
	if err := os.WriteFile(conf, []byte(e.noraConf(n, aliases)), 0o644); err != nil {
		return nil, err
	}
	addrFile := filepath.Join(e.dir, "nora-"+tag+".addrs.json")
	var err error
	n.proc, err = startProc("nora-breaker", filepath.Join(e.dir, "nora-"+tag+".log"), e.noraBin,
		"serve", "--config", conf, "--addr-file", addrFile)
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, n.proc)
	bound, err := listenaddr.WaitFile(addrFile, n.proc.pid(), 15*time.Second)
	if err != nil {
		return nil, fmt.Errorf("nora-breaker %s: %w (see %s)", tag, err, n.proc.log.Name())
	}
	n.listen, n.admin = bound["listen"], bound["admin"]
	return n, nil
}

// stopNora stops one proxy early (scenarios that need a fresh one).
func (e *env) stopNora(n *nora) { e.stopProc(n.proc) }

// force sets a breaker by hand through the admin API.
func (n *nora) force(key, state string) error {
	resp, err := http.Post("http://"+n.admin+"/breakers/force?key="+url.QueryEscape(key)+"&state="+state, "", nil)
	if err != nil {
		return fmt.Errorf("force %s %s: %w", key, state, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force %s %s: status %d", key, state, resp.StatusCode)
	}
	return nil
}

// switchHole turns the upstream's /switched/ paths into a black hole, or
// back.
func (e *env) switchHole(on bool) error {
	q := "0"
	if on {
		q = "1"
	}
	resp, err := http.Get("http://" + loop(e.upHTTP) + "/_bench/switch?hole=" + q)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// holes asks the upstream how many requests its black-holed listener saw.
func (e *env) holes() (int64, error) { return e.upstreamCount("/_bench/holes") }

// upstreamCount reads a count the upstream process reports at path.
func (e *env) upstreamCount(path string) (int64, error) {
	resp, err := http.Get("http://" + loop(e.upHTTP) + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func loop(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// portOf is the port of a "host:port" address.
func portOf(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

func poolFrom(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}
