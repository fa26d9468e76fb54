// Package listenaddr is how nora-breaker and its test harnesses learn the
// address a server really listens on, so that no port is ever picked by
// binding port 0, closing it and handing the number to another process
// (which then races every other program on the machine for it).
//
// Three ways, in order of preference:
//   - a server of ours binds port 0 itself and writes what it bound to an
//     address file (WriteFile; `nora-breaker serve --addr-file`), which the
//     harness waits for (WaitFile);
//   - a third-party server that can bind port 0 but does not say where is
//     looked up in /proc (WaitProcess);
//   - a server that refuses port 0 (squid, tinyproxy), or a listener that
//     must come back on the same port, gets a port that a Hold keeps bound
//     for as long as the harness needs it.
package listenaddr

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pollEvery is how often the Wait functions look again.
const pollEvery = 10 * time.Millisecond

// WriteFile writes addrs (a name → "host:port" map) as one JSON object to
// path, atomically: a reader sees either no file or the whole of it, never a
// partial write. The file is 0644, like a pid file.
func WriteFile(path string, addrs map[string]string) error {
	b, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("address file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("address file: %w", err)
	}
	return nil
}

// WaitFile polls path until the address file written by process pid
// appears, and returns its addresses, each checked to be on loopback. It
// gives up when within passes or when pid exits first (pid 0: do not watch a
// process). Remove a file left by an earlier run before starting the process.
func WaitFile(path string, pid int, within time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return parseFile(path, b)
		}
		if !os.IsNotExist(err) {
			return nil, err
		}
		if pid > 0 && exited(pid) {
			return nil, fmt.Errorf("process %d exited before writing %s", pid, path)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no address file %s after %v", path, within)
		}
		time.Sleep(pollEvery)
	}
}

func parseFile(path string, b []byte) (map[string]string, error) {
	var addrs map[string]string
	if err := json.Unmarshal(b, &addrs); err != nil {
		return nil, fmt.Errorf("address file %s: %w", path, err)
	}
	for name, a := range addrs {
		if err := loopback(a); err != nil {
			return nil, fmt.Errorf("address file %s: %s: %w", path, name, err)
		}
	}
	return addrs, nil
}

// loopback checks that addr is a loopback host:port with a real port: the
// harnesses only ever start servers that local clients alone can reach.
func loopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	if port == "0" {
		return fmt.Errorf("%s has no port", addr)
	}
	return nil
}
