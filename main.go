// Command nora-breaker is a forward HTTP(S) proxy that gives any HTTP client
// NORA's circuit breaker: it fails fast when a package registry upstream is
// down, asks the next upstream of the same format, and serves stale copies.
//
// main only wires: flags and environment → config.Load → a private
// Prometheus registry → proxy.New → listeners → signals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/cli"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
	"github.com/nora-breaker/nora-breaker/internal/logbuf"
	"github.com/nora-breaker/nora-breaker/procs"
	"github.com/nora-breaker/nora-breaker/proxy"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  nora-breaker [serve] [--config FILE] [--listen ADDR] [--admin-listen ADDR] [--addr-file FILE]
  nora-breaker check-config [--config FILE] [--skip-files]
  nora-breaker status [--admin URL] [--token T | --token-file F] [--watch]
  nora-breaker ca init --out DIR
  nora-breaker ca install-key --from FILE --to FILE [--cert-from FILE --cert-to FILE]
  nora-breaker sleep SECONDS
  nora-breaker probe [--ready URL]... [--proxy URL] [--timeout D]
  nora-breaker version
`

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args, stderr)
	case "check-config":
		return checkConfig(args, stdout, stderr)
	case "status":
		return status(args, stdout, stderr)
	case "ca":
		return caCommand(args, stdout, stderr)
	case "sleep":
		return sleepCommand(args, stderr)
	case "probe":
		return probeCommand(args, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "nora-breaker %s\n", version)
		return cli.ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return cli.ExitOK
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", cmd, usage)
	return cli.ExitUsage
}

// status prints the breakers of a running proxy (--watch: every second
// until Ctrl-C). The admin token is --token, else $NORA_SIDECAR_ADMIN_TOKEN,
// else the contents of --token-file.
func status(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", stderr)
	admin := fs.String("admin", "http://127.0.0.1:9128", "admin listener URL")
	token := fs.String("token", "", "admin token (default: $"+cli.TokenEnv+", then --token-file)")
	tokenFile := fs.String("token-file", "", "file whose first line is the admin token")
	watch := fs.Bool("watch", false, "redraw every second until interrupted")
	if fs.Parse(args) != nil || fs.NArg() > 0 {
		return cli.ExitUsage
	}
	tok, err := cli.AdminToken(*token, *tokenFile, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return cli.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return cli.Status(ctx, cli.StatusOptions{Admin: *admin, Token: tok, Watch: *watch}, stdout, stderr)
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// loadConfig parses the shared flags, plus any the subcommand adds with
// more (nil: none), and loads the configuration.
func loadConfig(name string, args []string, withListen bool, more func(*flag.FlagSet), stderr io.Writer) (*config.Config, config.Flags, int) {
	fs := newFlagSet(name, stderr)
	var flags config.Flags
	fs.StringVar(&flags.ConfigPath, "config", "", "NORA config.toml (default: $NORA_CONFIG_PATH, then ./config.toml)")
	if withListen {
		fs.StringVar(&flags.Listen, "listen", "", "proxy listen address (overrides [sidecar] listen)")
		fs.StringVar(&flags.AdminListen, "admin-listen", "", "admin listen address (overrides [sidecar] admin_listen)")
	}
	if more != nil {
		more(fs)
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		if err == nil {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, fs.Arg(0))
		}
		return nil, flags, cli.ExitUsage
	}
	cfg, err := config.Load(config.Options{Flags: flags, LookupEnv: os.LookupEnv})
	if err != nil {
		fmt.Fprintf(stderr, "invalid configuration:\n%v\n", err)
		return nil, flags, cli.ExitUsage
	}
	return cfg, flags, cli.ExitOK
}

// checkConfig validates the configuration and runs serve's start-up checks
// (cli.CheckStartup) on the files it names, so that it passes exactly what
// serve would start with; --skip-files leaves those out for a file checked
// away from where the proxy runs.
func checkConfig(args []string, stdout, stderr io.Writer) int {
	var skipFiles bool
	cfg, _, code := loadConfig("check-config", args, false, func(fs *flag.FlagSet) {
		fs.BoolVar(&skipFiles, "skip-files", false,
			"do not check the files the configuration names (CA, upstream_ca, stale_dir): for a file rendered elsewhere")
	}, stderr)
	if cfg == nil {
		return code
	}
	return cli.CheckConfig(cfg, cli.CheckOptions{SkipFiles: skipFiles, Now: time.Now}, stdout, stderr)
}

func caCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "install-key" {
		return caInstallKey(args[1:], stderr)
	}
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintf(stderr, "usage: nora-breaker ca init --out DIR | ca install-key --from FILE --to FILE [--cert-from FILE --cert-to FILE]\n")
		return cli.ExitUsage
	}
	fs := newFlagSet("ca init", stderr)
	out := fs.String("out", "", "directory for ca.pem and ca-key.pem")
	proxyURL := fs.String("proxy", "http://127.0.0.1:3128", "proxy URL to show in the instructions")
	if fs.Parse(args[1:]) != nil || *out == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: nora-breaker ca init --out DIR\n")
		return cli.ExitUsage
	}
	certPath, _, err := certs.Init(*out, time.Now)
	if err != nil {
		fmt.Fprintf(stderr, "ca init: %v\n", err)
		return cli.ExitRuntime
	}
	fmt.Fprint(stdout, certs.TrustInstructions(certPath, *proxyURL))
	return cli.ExitOK
}

// caInstallKey copies a CA key to an owner-only file (used by the Helm
// chart's init container; see certs.InstallKey), and with --cert-from the
// certificate next to it as one checked pair (certs.InstallPair).
func caInstallKey(args []string, stderr io.Writer) int {
	fs := newFlagSet("ca install-key", stderr)
	from := fs.String("from", "", "CA key to copy (e.g. from a Secret volume)")
	to := fs.String("to", "", "where to write the 0400 copy")
	certFrom := fs.String("cert-from", "", "CA certificate to copy with the key, checked to match it")
	certTo := fs.String("cert-to", "", "where to write the 0444 copy of the certificate")
	const usage = "usage: nora-breaker ca install-key --from FILE --to FILE [--cert-from FILE --cert-to FILE]\n"
	if fs.Parse(args) != nil || *from == "" || *to == "" || fs.NArg() > 0 || (*certFrom == "") != (*certTo == "") {
		fmt.Fprint(stderr, usage)
		return cli.ExitUsage
	}
	err := certs.InstallKey(*from, *to)
	if *certFrom != "" {
		err = certs.InstallPair(*certFrom, *from, *certTo, *to, time.Now)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ca install-key: %v\n", err)
		return cli.ExitRuntime
	}
	return cli.ExitOK
}

func serve(args []string, stderr io.Writer) int {
	var addrFile string
	cfg, flags, code := loadConfig("serve", args, true, func(fs *flag.FlagSet) {
		fs.StringVar(&addrFile, "addr-file", "",
			`once both listeners are bound, write {"listen":…,"admin":…} here (for listen addresses with port 0)`)
	}, stderr)
	if cfg == nil {
		return code
	}
	// Log lines are written in batches by one goroutine (logbuf), so no
	// request waits on stderr; what is pending is written before exit.
	logOut := logbuf.New(stderr, 0)
	defer logOut.Close()
	logger := newLogger(cfg, logOut)
	// go-redis logs reconnect errors through a package-wide logger; route it
	// into ours so every line is structured. main is the one place that may
	// set such process-wide things.
	redis.SetLogger(redisLogger{logger.With().Str("component", "redis").Logger()})
	for _, w := range cfg.Warnings {
		logger.Warn().Msg(w)
	}
	// The same checks check-config runs, so that it never passes a
	// configuration this refuses.
	if err := cli.CheckStartup(cfg, time.Now); err != nil {
		logger.Error().Err(err).Msg("cannot start")
		return cli.ExitUsage
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nora_sidecar_log_lines_dropped_total",
		Help: "Log lines dropped because the log's output fell more than 8 MiB behind.",
	}, func() float64 { return float64(logOut.Dropped()) }))
	p, err := proxy.New(cfg, proxy.Deps{Registry: reg, Logger: logger, Now: time.Now, Version: version})
	if err != nil {
		logger.Error().Err(err).Msg("cannot start")
		return cli.ExitUsage
	}
	proxyLn, err := net.Listen("tcp", cfg.Sidecar.Listen)
	if err != nil {
		logger.Error().Err(err).Msg("cannot listen")
		return cli.ExitRuntime
	}
	adminLn, err := net.Listen("tcp", cfg.Sidecar.AdminListen)
	if err != nil {
		proxyLn.Close()
		logger.Error().Err(err).Msg("cannot listen (admin)")
		return cli.ExitRuntime
	}
	if err := writeAddrFile(addrFile, proxyLn, adminLn); err != nil {
		proxyLn.Close()
		adminLn.Close()
		logger.Error().Err(err).Str("path", addrFile).Msg("cannot write --addr-file")
		return cli.ExitRuntime
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	flags.ConfigPath = cfg.Path
	go watchReloads(ctx, p, flags, logger)
	sizeScheduler(ctx, cfg.Sidecar.Procs, os.Getenv("GOMAXPROCS") != "", reg, logger)
	if err := p.Serve(ctx, proxyLn, adminLn); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error().Err(err).Msg("stopped")
		return cli.ExitRuntime
	}
	return cli.ExitOK
}

// sizeScheduler applies sidecar.procs (docs/behaviour.md §2.2): a fixed
// count, or, unless GOMAXPROCS in the environment already fixed it, a
// goroutine sizing the scheduler to the load until ctx ends. The processors in use are a
// metric either way.
func sizeScheduler(ctx context.Context, n int, fromEnv bool, reg prometheus.Registerer, log zerolog.Logger) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nora_sidecar_scheduler_procs",
		Help: "Processors the Go scheduler runs on (sidecar.procs; 0 there sizes it to the load).",
	}, func() float64 { return float64(runtime.GOMAXPROCS(0)) }))
	switch {
	case n > 0:
		runtime.GOMAXPROCS(n)
		log.Info().Int("procs", n).Msg("scheduler processors fixed by sidecar.procs")
	case fromEnv:
		log.Info().Int("procs", runtime.GOMAXPROCS(0)).Msg("scheduler processors fixed by GOMAXPROCS")
	default:
		go procs.Run(ctx, procs.Options{Changed: func(n int, use float64, wait time.Duration) {
			log.Debug().Int("procs", n).Float64("cpu_use", use).Dur("sched_wait_p90", wait).
				Msg("scheduler processors sized to the load")
		}})
	}
}

// writeAddrFile tells whoever started the process which addresses it bound
// (a listen address with port 0 gets one from the kernel), so a test never
// has to reserve a port, release it and hope nobody takes it before us.
// Connections made once the file exists wait in the listen backlog until
// Serve accepts them.
func writeAddrFile(path string, proxyLn, adminLn net.Listener) error {
	if path == "" {
		return nil
	}
	return listenaddr.WriteFile(path, map[string]string{
		"listen": proxyLn.Addr().String(), "admin": adminLn.Addr().String()})
}

// watchReloads re-reads the configuration on SIGHUP and whenever the config
// file changes (including a Kubernetes ConfigMap symlink swap). An invalid new
// configuration is refused and the old one stays in force, as is one
// config.Reload refuses (an empty file, one naming none of the upstreams in
// force).
func watchReloads(ctx context.Context, p *proxy.Proxy, flags config.Flags, logger zerolog.Logger) {
	path := flags.ConfigPath
	reload := func(why string) {
		cfg, err := config.Reload(config.ReloadOptions{Options: config.Options{Flags: flags, LookupEnv: os.LookupEnv}},
			p.Config())
		if err != nil {
			p.ReloadFailed()
			logger.Error().Err(err).Str("trigger", why).Msg("reload refused: invalid configuration, keeping the old one")
			return
		}
		restart, err := p.Reload(cfg)
		if err != nil {
			logger.Error().Err(err).Str("trigger", why).Msg("reload refused, keeping the old configuration")
			return
		}
		logger.Info().Str("trigger", why).Strs("needs_restart", restart).Msg("configuration reloaded")
	}
	changed := make(chan struct{}, 1)
	if path != "" {
		err := config.Watch(ctx, path, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}, func(err error) { logger.Warn().Err(err).Msg("config file watch") })
		if err != nil {
			logger.Warn().Err(err).Str("path", path).Msg("cannot watch the config file; SIGHUP still reloads")
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case <-changed:
			reload("file change")
		}
	}
}

// redisLogger adapts zerolog to go-redis's logger interface.
type redisLogger struct{ log zerolog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.log.Warn().Msgf(format, v...)
}

// newLogger builds the process logger: JSON on stderr, or console for people.
func newLogger(cfg *config.Config, stderr io.Writer) zerolog.Logger {
	var w io.Writer = stderr
	if cfg.Sidecar.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
	}
	lvl, err := zerolog.ParseLevel(cfg.Sidecar.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}
