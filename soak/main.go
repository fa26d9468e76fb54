// Command soak is nora-breaker's chaos soak: it runs the real binary as a
// separate process in front of fake docker, maven, pypi and npm registries
// (two upstreams each, on loopback), keeps 128 client connections busy with
// mixed traffic while toxiproxy cycles the primaries through refused,
// black-holed, reset and slow, and then checks that every answer was one the
// behaviour contract (docs/behaviour.md) allows, that rejections were fast, that the breakers followed the
// faults, and that the process returned to its idle footprint.
//
// It is a module of its own (soak/go.mod); bash soak/run.sh installs
// toxiproxy, builds the binary and runs it from the repository root with
//
//	go -C soak run . -duration 2m -bin … -toxiproxy … -work …
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// options of one soak run.
type options struct {
	duration  time.Duration
	conns     int
	faultLen  time.Duration
	healthy   time.Duration
	bin       string
	toxiproxy string
	work      string
	stale     bool
	think     time.Duration
	rejectP99 time.Duration
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long the load runs")
	flag.IntVar(&o.conns, "conns", 128, "concurrent client connections")
	flag.DurationVar(&o.faultLen, "fault", 4*time.Second, "length of each fault window")
	flag.DurationVar(&o.healthy, "healthy", 4*time.Second, "length of each healthy window")
	// The defaults are relative to soak/, where go -C soak run . runs.
	flag.StringVar(&o.bin, "bin", ".work/nora-breaker", "nora-breaker binary (bash soak/run.sh builds it with scripts/build.sh)")
	flag.StringVar(&o.toxiproxy, "toxiproxy", "../.tools/toxiproxy-server", "toxiproxy server binary")
	flag.StringVar(&o.work, "work", ".work", "scratch directory")
	flag.BoolVar(&o.stale, "stale", true, "turn the stale cache on")
	flag.DurationVar(&o.rejectP99, "reject-p99", upstreamTimeout/20,
		"limit for the p99 latency of rejected requests (default: a twentieth of the upstream timeout a rejection spares)")
	flag.DurationVar(&o.think, "think", 100*time.Millisecond, "mean pause of a client between requests")
	flag.Parse()
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// env is everything a run started; close stops it all.
type env struct {
	fakes     []*fake
	procs     []*exec.Cmd
	proxyURL  *url.URL
	admin     string
	primaries []string // breaker keys
	secondary []string
	toxi      *toxi
	toxNames  []string
	holds     []*listenaddr.Hold // the primaries' toxiproxy ports
	targets   []target
	secNames  map[string]bool
}

func (e *env) close() {
	for _, p := range e.procs {
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = p.Process.Kill()
			}
		}
	}
	for _, f := range e.fakes {
		f.close()
	}
	for _, h := range e.holds {
		_ = h.Close()
	}
}

// startProc starts a child process (its own process group, output to log).
func startProc(work, name string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(work, filepath.Base(name)+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return cmd, nil
}

var formats = []string{"docker", "maven", "pypi", "npm"}

// suspectAfter is the soak's suspect_after: above the slow window's
// latency (300 ± 50 ms, toxi.go), as a deployment sets it above its
// registries' slowest answers, and below upstreamTimeout. The default 10 s
// would never come within a 4 s fault window, and without early opening a
// black hole met by identical requests (one shared fetch, one failure a
// round) or by hedged ones (each given up, neutral) would not open its
// breaker within the window (docs/behaviour.md §4).
const suspectAfter = 600 * time.Millisecond

// upstreamTimeout is the proxy_timeout every upstream gets in the soak's
// config: the wait a rejection spares a client, and so the yardstick for how
// fast a rejection must be. A fixed few milliseconds would measure the
// machine's load instead of the proxy (a CPU-starved runner adds that much
// scheduling delay on its own); a twentieth of the wait still fails a proxy
// that lets a rejected request touch the network.
const upstreamTimeout = time.Second

// upstreamPath is the path part of a format's upstream URL.
func upstreamPath(format string) string {
	switch format {
	case "maven":
		return "/maven2"
	case "pypi":
		return "/simple"
	}
	return ""
}

// setup starts the fakes, toxiproxy and nora-breaker.
func setup(ctx context.Context, o options) (*env, error) {
	e := &env{secNames: map[string]bool{}}
	// Toxiproxy's API binds port 0; its log only says "127.0.0.1:0", so the
	// port it got is read from /proc.
	cmd, err := startProc(o.work, o.toxiproxy, "-host", "127.0.0.1", "-port", "0")
	if err != nil {
		return e, err
	}
	e.procs = append(e.procs, cmd)
	api, err := listenaddr.WaitProcess(cmd.Process.Pid, 1, 10*time.Second)
	if err != nil {
		return e, fmt.Errorf("toxiproxy: %w", err)
	}
	e.toxi = &toxi{api: "http://" + api[0], client: &http.Client{Timeout: 5 * time.Second}}
	if err := e.toxi.waitReady(ctx); err != nil {
		return e, err
	}
	urls := map[string][2]string{}
	for _, f := range formats {
		a, err := startFake(f, f+"-a")
		if err != nil {
			return e, err
		}
		b, err := startFake(f, f+"-b")
		if err != nil {
			return e, err
		}
		e.fakes = append(e.fakes, a, b)
		// The "refused" fault disables the toxiproxy proxy, which closes
		// its listener and opens it again on the same port when healed. A
		// Hold keeps the port for the whole run, so nothing else can take
		// it in between and refused means nothing listening.
		hold, err := listenaddr.NewHold()
		if err != nil {
			return e, err
		}
		e.holds = append(e.holds, hold)
		listen := hold.Addr()
		name := f + "-primary"
		if err := e.toxi.create(ctx, name, listen, a.addr); err != nil {
			return e, err
		}
		e.toxNames = append(e.toxNames, name)
		pa, pb := "http://"+listen+upstreamPath(f), "http://"+b.addr+upstreamPath(f)
		urls[f] = [2]string{pa, pb}
		e.primaries = append(e.primaries, f+":"+pa)
		e.secondary = append(e.secondary, f+":"+pb)
		e.secNames[b.name] = true
		e.targets = append(e.targets, target{format: f, method: http.MethodGet, url: pa + artifactPath(f, false), primary: a.name})
		if f == "maven" || f == "docker" {
			e.targets = append(e.targets, target{format: f, method: http.MethodGet, url: pa + artifactPath(f, true),
				primary: a.name, missing: true})
		}
		if f == "maven" || f == "npm" {
			e.targets = append(e.targets, target{format: f, method: http.MethodPut, url: pa + artifactPath(f, false), primary: a.name})
		}
	}
	return e, startProxy(ctx, o, e, urls)
}

// startProxy writes the config and starts nora-breaker on port 0; it
// reports the addresses it bound with --addr-file.
func startProxy(ctx context.Context, o options, e *env, urls map[string][2]string) error {
	staleLine := ""
	if o.stale {
		staleLine = fmt.Sprintf("stale_dir = %q\n", filepath.Join(o.work, "stale"))
	}
	conf := fmt.Sprintf(`[circuit_breaker]
enabled = true
failure_threshold = 5
reset_timeout = 2
suspect_after = %[11]g
[registries]
enable = "docker,maven,pypi,npm"
[docker]
proxy_timeout = %[10]d
read_timeout = %[10]d
[[docker.upstreams]]
url = %[1]q
[[docker.upstreams]]
url = %[2]q
[maven]
proxies = [%[3]q, %[4]q]
proxy_timeout = %[10]d
[pypi]
proxies = [%[5]q, %[6]q]
proxy_timeout = %[10]d
[npm]
proxies = [%[7]q, %[8]q]
proxy_timeout = %[10]d
[sidecar]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
dial_timeout = "1s"
log_level = "warn"
%[9]s`, urls["docker"][0], urls["docker"][1], urls["maven"][0], urls["maven"][1], urls["pypi"][0], urls["pypi"][1],
		urls["npm"][0], urls["npm"][1], staleLine, int(upstreamTimeout/time.Second), suspectAfter.Seconds())
	path := filepath.Join(o.work, "config.toml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	addrFile := filepath.Join(o.work, "nora-breaker.addrs.json")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		return err
	}
	cmd, err := startProc(o.work, o.bin, "serve", "--config", path, "--addr-file", addrFile)
	if err != nil {
		return err
	}
	e.procs = append([]*exec.Cmd{cmd}, e.procs...)
	bound, err := listenaddr.WaitFile(addrFile, cmd.Process.Pid, 15*time.Second)
	if err != nil {
		return fmt.Errorf("nora-breaker: %w (see %s)", err, filepath.Join(o.work, "nora-breaker.log"))
	}
	e.proxyURL = &url.URL{Scheme: "http", Host: bound["listen"]}
	e.admin = "http://" + bound["admin"]
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.Get(e.admin + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nora-breaker not ready at %s (see %s)", e.admin, filepath.Join(o.work, "nora-breaker.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
