//go:build linux

// Package squidtest runs Debian's squid on loopback as the parent proxy of
// tests: basic authentication from a password file, names from a hosts
// file of its own, no cache, its own pid and log files, stopped by its PID.
package squidtest

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// ncsaAuth is where Debian's squid package puts its password-file helper.
const ncsaAuth = "/usr/lib/squid/basic_ncsa_auth"

// Options shape one squid.
type Options struct {
	// Users are the accounts squid asks for with basic authentication
	// (user → password); none: squid asks for no credentials.
	Users map[string]string
	// Hosts are names squid resolves from a hosts file of its own
	// (name → loopback address), so tests use names and no DNS.
	Hosts map[string]string
	// OnStart, when set, is told squid's PID each time it starts (the
	// end-to-end suite records it, to stop a squid a killed test run left
	// behind). squid leads a process group of its own, with its helpers.
	OnStart func(pid int)
}

// Squid is one running squid.
type Squid struct {
	// Addr is "127.0.0.1:<port>"; URL "http://" + Addr.
	Addr, URL string
	dir       string
	conf      string
	hold      *listenaddr.Hold
	cmd       *exec.Cmd
	done      chan error
	onStart   func(pid int)
}

// Binary is the squid binary, or "" when squid is not installed.
func Binary() string {
	if p, err := exec.LookPath("squid"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/squid"); err == nil {
		return "/usr/sbin/squid"
	}
	return ""
}

// Start starts squid with o on a fresh loopback port and stops it when
// the test ends. The test is skipped, saying how to install it, when squid
// is not installed; the CI installs it (scripts/install-squid.sh).
func Start(t testing.TB, o Options) *Squid {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("squid is not installed (bash scripts/install-squid.sh installs Debian's package); the CI installs it")
	}
	if len(o.Users) > 0 {
		if _, err := os.Stat(ncsaAuth); err != nil {
			t.Skipf("squid's %s is missing: %v", ncsaAuth, err)
		}
	}
	// squid refuses port 0: it gets a port a Hold keeps bound, never
	// released before squid listens on it, and still held once it stops,
	// so connections to a stopped squid are refused and nothing else can
	// take its port.
	hold, err := listenaddr.NewHold()
	if err != nil {
		t.Fatal(err)
	}
	s := &Squid{Addr: hold.Addr(), URL: "http://" + hold.Addr(), hold: hold, onStart: o.OnStart}
	t.Cleanup(func() {
		s.Stop()
		_ = hold.Close()
	})
	if s.dir, err = runDir(t); err != nil {
		t.Fatal(err)
	}
	if err := s.writeFiles(o); err != nil {
		t.Fatal(err)
	}
	if err := s.start(bin); err != nil {
		t.Fatal(err)
	}
	return s
}

// runDir is squid's own directory. squid started by root runs as the
// package's "proxy" user, which cannot enter a test's temporary directory
// (mode 0700, root's), so it gets a directory of its own under the system
// temporary directory, owned by that user and removed at cleanup.
func runDir(t testing.TB) (string, error) {
	if os.Geteuid() != 0 {
		return t.TempDir(), nil
	}
	dir, err := os.MkdirTemp("", "nora-squid-")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, gid, err := proxyUser()
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.Chown(dir, uid, gid)
}

// proxyUser is the uid and gid squid switches to when started by root.
func proxyUser() (uid, gid int, err error) {
	u, err := user.Lookup("proxy")
	if err != nil {
		return 0, 0, fmt.Errorf("squid runs as user proxy, which does not exist: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// writeFiles writes squid.conf and, as o asks, the password and hosts
// files, each readable by the user squid runs as.
func (s *Squid) writeFiles(o Options) error {
	var auth []string
	if len(o.Users) > 0 {
		var lines []string
		for u, p := range o.Users {
			// basic_ncsa_auth takes a bare MD5 hex digest as well as
			// crypt(3) hashes; it is only ever a test's password.
			sum := md5.Sum([]byte(p))
			lines = append(lines, u+":"+hex.EncodeToString(sum[:]))
		}
		sort.Strings(lines)
		pw := filepath.Join(s.dir, "passwd")
		if err := os.WriteFile(pw, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		auth = []string{
			"auth_param basic program " + ncsaAuth + " " + pw,
			"auth_param basic children 2 startup=1 idle=1",
			"auth_param basic realm nora-breaker tests",
			"acl authed proxy_auth REQUIRED",
			"http_access allow authed",
			"http_access deny all",
		}
	} else {
		auth = []string{"http_access allow all"}
	}
	hosts := filepath.Join(s.dir, "hosts")
	var hl []string
	for name, ip := range o.Hosts {
		hl = append(hl, ip+" "+name)
	}
	sort.Strings(hl)
	if err := os.WriteFile(hosts, []byte(strings.Join(hl, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	s.conf = filepath.Join(s.dir, "squid.conf")
	conf := append([]string{
		"http_port " + s.Addr,
		"pid_filename " + filepath.Join(s.dir, "squid.pid"),
		"cache_log " + filepath.Join(s.dir, "cache.log"),
		"access_log stdio:" + filepath.Join(s.dir, "access.log"),
		"cache_store_log none",
		"cache deny all",
		"cache_mem 8 MB",
		"pinger_enable off",
		"icp_port 0",
		"htcp_port 0",
		"coredump_dir " + s.dir,
		"shutdown_lifetime 0 seconds",
		"netdb_filename none",
		"logfile_rotate 0",
		"hosts_file " + hosts,
		// Names come from the hosts file; a query nobody answers stays on
		// this machine.
		"dns_nameservers 127.0.0.1",
		"negative_ttl 0 seconds",
		"forward_max_tries 1",
	}, auth...)
	if os.Geteuid() == 0 {
		conf = append(conf, "cache_effective_user proxy")
	}
	return os.WriteFile(s.conf, []byte(strings.Join(conf, "\n")+"\n"), 0o644)
}

// start runs squid in the foreground (-N) and waits until it listens.
func (s *Squid) start(bin string) error {
	out, err := os.Create(filepath.Join(s.dir, "squid.out"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-N", "-f", s.conf)
	cmd.Stdout, cmd.Stderr, cmd.Env = out, out, cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start squid: %w", err)
	}
	if s.onStart != nil {
		s.onStart(cmd.Process.Pid)
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	go func() {
		s.done <- cmd.Wait()
		out.Close()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			return fmt.Errorf("squid exited before listening (%v):\n%s", werr, s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("squid not listening on %s after 30s:\n%s", s.Addr, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills squid, and its helpers with it, through its PID's process
// group, and waits for it: a parent going down at once, as a crashed or
// unplugged one does (a graceful squid shutdown takes seconds of its own).
// Its port stays held: a connection to it is refused at once.
func (s *Squid) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Restart starts squid again on the same port, after Stop.
func (s *Squid) Restart(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("squid is running")
	}
	if err := s.start(Binary()); err != nil {
		t.Fatal(err)
	}
}

// AccessLog is squid's access log: one line per request it handled, with
// the method, the URL or CONNECT target, and the user.
func (s *Squid) AccessLog() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "access.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

// Logs is squid's own output and cache log, for a test's failure message.
func (s *Squid) Logs() string {
	var b strings.Builder
	for _, name := range []string{"squid.out", "cache.log"} {
		data, _ := os.ReadFile(filepath.Join(s.dir, name))
		fmt.Fprintf(&b, "--- %s\n%s", name, data)
	}
	return b.String()
}

// cleanEnv is the environment without proxy variables, which squid would
// not use but its helpers might.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}
