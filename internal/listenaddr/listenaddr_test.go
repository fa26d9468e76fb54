package listenaddr

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWriteFileThenWaitFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addrs.json")
	want := map[string]string{"listen": "127.0.0.1:41000", "admin": "[::1]:41001"}
	if err := WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v, mode %v; want 0644", err, st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".addrs.json.tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	got, err := WaitFile(path, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got["listen"] != want["listen"] || got["admin"] != want["admin"] || len(got) != 2 {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A rewrite replaces the file whole: a reader never sees a mix of the two.
func TestWriteFileReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "addrs.json")
	for _, port := range []string{"41000", "41002"} {
		if err := WriteFile(path, map[string]string{"listen": "127.0.0.1:" + port}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := WaitFile(path, 0, time.Second); err != nil || got["listen"] != "127.0.0.1:41002" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestWaitFileRefuses(t *testing.T) {
	for name, text := range map[string]string{
		"off loopback": `{"listen":"0.0.0.0:3128"}`,
		"port zero":    `{"listen":"127.0.0.1:0"}`,
		"not json":     `listen=127.0.0.1:3128`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "addrs.json")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := WaitFile(path, 0, time.Second); err == nil {
				t.Fatalf("accepted %s: %v", text, got)
			}
		})
	}
}

func TestWaitFileStopsWhenTheProcessExits(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	start := time.Now()
	_, err := WaitFile(filepath.Join(t.TempDir(), "never.json"), cmd.Process.Pid, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("err = %v, want the process's exit", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v to notice the exit", took)
	}
}

func TestWaitFileTimesOut(t *testing.T) {
	_, err := WaitFile(filepath.Join(t.TempDir(), "never.json"), 0, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no address file") {
		t.Fatalf("err = %v", err)
	}
}

// The test process is its own subject: it listens on port 0 and asks /proc
// where.
func TestProcessFindsOwnListeners(t *testing.T) {
	ln4 := listen(t, "tcp4", "127.0.0.1:0")
	ln6 := listen(t, "tcp6", "[::1]:0")
	addrs, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range []net.Listener{ln4, ln6} {
		if !slices.Contains(addrs, ln.Addr().String()) {
			t.Errorf("Process lacks %s: %v", ln.Addr(), addrs)
		}
	}
	// A connected socket is not a listener.
	c, err := net.Dial("tcp", ln4.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	again, _ := Process(os.Getpid())
	if slices.Contains(again, c.LocalAddr().String()) {
		t.Errorf("Process lists the client socket %s", c.LocalAddr())
	}
}

func TestWaitProcessCountsAndChecks(t *testing.T) {
	pid := os.Getpid()
	before, err := Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	listen(t, "tcp4", "127.0.0.1:0")
	got, err := WaitProcess(pid, len(before)+1, 5*time.Second)
	if err != nil || len(got) != len(before)+1 {
		t.Fatalf("WaitProcess: %v, %v", got, err)
	}
	if _, err := WaitProcess(pid, len(before), time.Second); err == nil {
		t.Fatal("more listeners than asked for was accepted")
	}
	if _, err := WaitProcess(pid, len(before)+2, 50*time.Millisecond); err == nil {
		t.Fatal("too few listeners was accepted")
	}
}

func TestWaitProcessStopsWhenTheProcessExits(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	if _, err := WaitProcess(cmd.Process.Pid, 1, 30*time.Second); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("err = %v, want the process's exit", err)
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0050":                         "0.0.0.0:80",
		"00000000000000000000000001000000:1F90": "[::1]:8080",
	} {
		if got, err := parseProcAddr(in); err != nil || got != want {
			t.Errorf("parseProcAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:XYZ", "01007F:0050", "0100007F:10000"} {
		if got, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) = %q, want an error", bad, got)
		}
	}
}

// A held port refuses connections, is not handed out again, and takes a
// listener told to use it, as often as that listener comes and goes.
func TestHold(t *testing.T) {
	h, err := NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	refused := func() bool {
		c, err := net.DialTimeout("tcp", h.Addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	if !refused() {
		t.Fatal("a held port accepted a connection")
	}
	for range 2 {
		ln := listen(t, "tcp4", h.Addr())
		c, err := net.Dial("tcp", h.Addr())
		if err != nil {
			t.Fatalf("listener on the held port: %v", err)
		}
		c.Close()
		ln.Close()
		if !refused() {
			t.Fatal("connection not refused after the listener closed")
		}
	}
	// A socket without SO_REUSEADDR cannot take it.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: h.Port(), Addr: [4]byte{127, 0, 0, 1}})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind without SO_REUSEADDR: %v, want EADDRINUSE", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Port-0 binds never land on a held port. The kernel picks ports at random,
// so this is a sample (about a third of the ephemeral range), not a proof.
func TestHoldIsNotHandedOut(t *testing.T) {
	h, err := NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	for range 10000 {
		ln := listen(t, "tcp4", "127.0.0.1:0")
		if ln.Addr().String() == h.Addr() {
			t.Fatalf("bind(:0) got the held port %s", h.Addr())
		}
		ln.Close()
	}
}

func listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		if network == "tcp6" {
			t.Skip("no IPv6 loopback:", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
