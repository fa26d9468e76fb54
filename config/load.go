package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
)

// Flags are the command-line values; they beat everything else.
type Flags struct {
	ConfigPath  string // --config
	Listen      string // --listen
	AdminListen string // --admin-listen
}

// Options are Load's inputs. Every source is injectable so tests never touch
// the process environment or the working directory.
type Options struct {
	Flags Flags
	// LookupEnv is os.LookupEnv in production; nil means an empty environment.
	LookupEnv func(string) (string, bool)
	// ReadFile reads the config file; nil means os.ReadFile. A missing file
	// must yield an error matching fs.ErrNotExist.
	ReadFile func(string) ([]byte, error)
}

// defaultConfigPath is read when neither --config nor NORA_CONFIG_PATH names
// a file, as NORA does; its absence is not an error.
const defaultConfigPath = "config.toml"

// Load reads the config file, environment and flags (flags > env > file >
// defaults) and returns the validated Config. On failure it returns every
// problem found, joined with errors.Join; each is a *Error.
func Load(opts Options) (*Config, error) {
	probs := &problems{}
	e := env{lookup: opts.LookupEnv, probs: probs}
	path, root := readFile(opts, e, probs)
	cfg := &Config{Path: path}
	cfg.CircuitBreaker = readCircuitBreaker(root, e)
	enabled := enabledFormats(root, e)
	sidecar, from := readSidecar(root, e, opts.Flags)
	parents, noProxy := validateSidecar(&sidecar, from, probs)
	cfg.Sidecar = sidecar
	cfg.Parent, cfg.NoProxy = parents.def, noProxy
	warn := func(s string) { cfg.Warnings = append(cfg.Warnings, s) }
	for _, spec := range formatSpecs() {
		if !enabled[spec.name] {
			continue
		}
		r := reader{spec: spec, t: root.table(spec.table), e: e, filePath: path, warn: warn}
		in := chainInput{spec: spec, entries: r.entries(), aliases: sidecar.Aliases, equivalents: sidecar.Equivalents}
		in.proxyTimeout, in.readTimeout = r.timeouts()
		in.hedgeAfter = r.hedgeAfter()
		if spec.name == "nuget" {
			in.extraHosts = r.nugetHosts()
		}
		cfg.Upstreams = append(cfg.Upstreams, buildChain(in, probs)...)
	}
	for _, u := range cfg.Upstreams {
		u.Parent = parents.of(u)
	}
	if err := probs.err(); err != nil {
		return nil, err
	}
	cfg.resolveWaits()
	cfg.Warnings = append(cfg.Warnings, typoWarnings(root)...)
	cfg.Warnings = append(cfg.Warnings, warnings(cfg, enabled)...)
	return cfg, nil
}

// readFile finds and decodes the config file: --config, else
// NORA_CONFIG_PATH, else ./config.toml if it exists. A file that was named
// explicitly must exist.
func readFile(opts Options, e env, probs *problems) (string, tbl) {
	read := opts.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	path, named := opts.Flags.ConfigPath, true
	src := Error{Source: "flag", Key: "--config", Value: path}
	if path == "" {
		path, _ = e.nonEmpty("NORA_CONFIG_PATH")
		src = Error{Source: "env", Key: "NORA_CONFIG_PATH", Value: path}
	}
	if path == "" {
		path, named = defaultConfigPath, false
	}
	data, err := read(path)
	if err != nil {
		if !named && errors.Is(err, fs.ErrNotExist) {
			return "", tbl{}
		}
		src.Problem = fmt.Sprintf("cannot read config file: %v", err)
		if !named {
			src = Error{Source: "file " + path, Problem: src.Problem}
		}
		probs.add(&src)
		return path, tbl{}
	}
	root, _ := decodeFile(path, data, probs)
	return path, root
}

// warnings lists the non-fatal findings an operator should see at start.
func warnings(cfg *Config, enabled map[string]bool) []string {
	var out []string
	// Every upstream's key is the key of its URL host, and every upstream
	// has a host listed, so this names every key and format there is.
	keys := map[string]bool{}
	for _, b := range cfg.HostBreakers() {
		keys[b.Key] = true
		keys[b.Upstream.Format] = true
	}
	for _, p := range cfg.Parents() {
		keys[p.Key()], keys[ParentFormat] = true, true
	}
	for _, k := range sortedKeys(cfg.CircuitBreaker.Overrides) {
		if !keys[k] && !enabled[k] {
			out = append(out, fmt.Sprintf("circuit_breaker.overrides %q names no configured upstream key or enabled format", k))
		}
	}
	for table, lists := range map[string]map[string][]string{"aliases": cfg.Sidecar.Aliases,
		"equivalents": cfg.Sidecar.Equivalents} {
		for _, k := range sortedKeys(lists) {
			if !keys[k] {
				out = append(out, fmt.Sprintf("sidecar.%s %q names no configured upstream key or format", table, k))
			}
		}
	}
	for _, k := range sortedKeys(cfg.Sidecar.Parents) {
		if !keys[k] {
			out = append(out, fmt.Sprintf("sidecar.parents %q names no configured upstream key or format", k))
		}
	}
	if !cfg.CircuitBreaker.Enabled {
		out = append(out, "circuit breaker is disabled: requests are forwarded, failed over and measured, but never rejected")
	}
	if !cfg.Sidecar.DenyUnlisted && !isLoopbackListen(cfg.Sidecar.Listen) {
		out = append(out, fmt.Sprintf("listen %s is not loopback and deny_unlisted is off: the proxy is an open relay to any host", cfg.Sidecar.Listen))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
