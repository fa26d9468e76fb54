package stale

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// logLines splits a JSON log into its lines.
func logLines(buf *testkit.SyncBuffer) []string {
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// warnLines are the log lines at warn level.
func warnLines(buf *testkit.SyncBuffer) []string {
	var out []string
	for _, l := range logLines(buf) {
		if strings.Contains(l, `"level":"warn"`) {
			out = append(out, l)
		}
	}
	return out
}

// writeErrors is write_errors_total of one cause.
func writeErrors(t *testing.T, reg *prometheus.Registry, cause string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nora_sidecar_stale_cache_write_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == cause {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no write_errors_total{cause=%q}", cause)
	return 0
}

// The proxy hands the cache a logger that already names the component (as
// it does for every part it wires); each line must carry the field once,
// since some log pipelines refuse a document with a duplicate key.
func TestLogLinesNameTheComponentOnce(t *testing.T) {
	var buf testkit.SyncBuffer
	log := zerolog.New(&buf).With().Str("component", "stale").Logger()
	c, _ := newTestCache(t, Options{Logger: log})
	c.syncFile = func(*os.File) error { return syscall.EIO }
	store(t, c, "k", "body")
	lines := logLines(&buf)
	if len(lines) < 2 {
		t.Fatalf("want the load line and a write failure, got %q", lines)
	}
	for _, l := range lines {
		if n := strings.Count(l, `"component":"stale"`); n != 1 {
			t.Errorf("%d component fields in %s", n, l)
		}
	}
}

// A full disk (or any lasting disk failure) makes every answer's write
// fail: one warning per cause per minute, the rest counted in the next
// line, every failure in write_errors_total by cause.
func TestDiskFailuresAreRateLimitedAndCounted(t *testing.T) {
	var buf testkit.SyncBuffer
	clk := testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	c, reg := newTestCache(t, Options{Logger: zerolog.New(&buf), Now: clk.Now})
	c.syncFile = func(*os.File) error { return fmt.Errorf("sync: %w", syscall.ENOSPC) }
	for i := range 50 {
		store(t, c, fmt.Sprintf("k%d", i), "body")
	}
	if got := warnLines(&buf); len(got) != 1 {
		t.Fatalf("50 failed writes logged %d warnings, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	if n := writeErrors(t, reg, "no_space"); n != 50 {
		t.Errorf("write_errors_total{cause=no_space} = %v, want 50", n)
	}
	clk.Advance(time.Minute)
	store(t, c, "one more", "body")
	got := warnLines(&buf)
	if len(got) != 2 || !strings.Contains(got[1], `"suppressed":49`) {
		t.Fatalf("a minute later: %d warnings, want a second one saying 49 were left out:\n%s", len(got), strings.Join(got, "\n"))
	}
	if files := filesIn(t, c.dir); len(files) != 0 {
		t.Errorf("failed writes left files: %v", files)
	}
}

// A stale_dir on a full disk is said once, when the cache opens: the
// writes that then fail within the minute are counted, not logged again.
func TestOpenSaysOnceThatTheDiskIsFull(t *testing.T) {
	var buf testkit.SyncBuffer
	c, reg := newTestCache(t, Options{Logger: zerolog.New(&buf),
		checkDir: func(string) (bool, error) { return true, nil }})
	if got := warnLines(&buf); len(got) != 1 || !strings.Contains(got[0], "full") {
		t.Fatalf("open on a full disk logged %q, want one warning saying so", got)
	}
	c.syncFile = func(*os.File) error { return syscall.ENOSPC }
	for i := range 5 {
		store(t, c, fmt.Sprintf("k%d", i), "body")
	}
	if got := warnLines(&buf); len(got) != 1 {
		t.Errorf("writes failing on the disk that was full at start logged again:\n%s", strings.Join(got, "\n"))
	}
	if n := writeErrors(t, reg, "no_space"); n != 5 {
		t.Errorf("write_errors_total{cause=no_space} = %v, want 5", n)
	}
}

// readOnlyDir makes a directory this process cannot create files in, even
// as root (the immutable attribute), or skips the test.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot make a directory read-only for root (chattr +i: %v %s)", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	}
	return dir
}

// A stale_dir that cannot be written is a misconfiguration: Open refuses
// it, once, instead of a warning per request.
func TestOpenRefusesADirItCannotWrite(t *testing.T) {
	dir := readOnlyDir(t)
	_, err := Open(Options{Dir: dir, Registerer: prometheus.NewRegistry()})
	if !errors.Is(err, ErrNotWritable) {
		t.Fatalf("Open of a read-only directory: %v, want ErrNotWritable", err)
	}
	if err := CheckDir(dir); !errors.Is(err, ErrNotWritable) {
		t.Errorf("CheckDir of a read-only directory: %v", err)
	}
	if err := CheckDir(filepath.Join(dir, "not", "yet")); !errors.Is(err, ErrNotWritable) {
		t.Errorf("CheckDir of a directory that cannot be created: %v", err)
	}
	if err := CheckDir(filepath.Join(t.TempDir(), "not", "yet")); err != nil {
		t.Errorf("CheckDir of a directory Open can create: %v", err)
	}
}

// Open's errors do not name the package: the caller wraps them with its
// own prefix ("stale cache: …"), which a prefix of ours would double.
func TestOpenErrorsDoNotRepeatThePrefix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{}, {Dir: filepath.Join(file, "sub")}} {
		_, err := Open(o)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", o.Dir)
		}
		if strings.Contains(err.Error(), "stale cache") {
			t.Errorf("Open(%q): %q names the package", o.Dir, err)
		}
	}
	// Nor does a metrics clash.
	_, reg := newTestCache(t, Options{})
	if _, err := Open(Options{Dir: t.TempDir(), Registerer: reg}); err == nil || strings.Contains(err.Error(), "stale cache") {
		t.Errorf("second Open on one registry: %v", err)
	}
}
