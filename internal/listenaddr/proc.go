package listenaddr

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tcpListen is the state code of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// Process returns the TCP addresses ("host:port", sorted) on which process
// pid or any of its descendants holds a listening socket. It matches the
// socket inodes in /proc/<pid>/fd against /proc/<pid>/net/tcp and tcp6, so it
// needs the right to read the process's descriptors (same user, or root).
func Process(pid int) ([]string, error) {
	inodes := map[string]bool{}
	for _, p := range family(pid) {
		if err := socketInodes(p, inodes); err != nil && p == pid {
			return nil, err
		}
	}
	var addrs []string
	for _, table := range []string{"tcp", "tcp6"} {
		found, err := listeners(filepath.Join("/proc", strconv.Itoa(pid), "net", table), inodes)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		addrs = append(addrs, found...)
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}

// WaitProcess polls until process pid (with its descendants) listens on
// exactly n TCP addresses, all on loopback, and returns them sorted. It fails
// at once on a listener off loopback or more than n of them, when pid exits,
// and when within passes. Use it for a server started on port 0 that does not
// say which port it got.
func WaitProcess(pid, n int, within time.Duration) ([]string, error) {
	deadline := time.Now().Add(within)
	for {
		addrs, err := Process(pid)
		if err != nil && !exited(pid) {
			return nil, err
		}
		for _, a := range addrs {
			if err := loopback(a); err != nil {
				return nil, fmt.Errorf("process %d listens off loopback: %w", pid, err)
			}
		}
		switch {
		case len(addrs) == n:
			return addrs, nil
		case len(addrs) > n:
			return nil, fmt.Errorf("process %d listens on %v, want %d address(es)", pid, addrs, n)
		case exited(pid):
			return nil, fmt.Errorf("process %d exited before listening", pid)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("process %d listens on %v after %v, want %d address(es)", pid, addrs, within, n)
		}
		time.Sleep(pollEvery)
	}
}

// family is pid and its descendants, from /proc/<pid>/task/*/children. A
// server started through a wrapper that forks (rather than execs) is found
// by the process the harness started.
func family(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				if id, err := strconv.Atoi(c); err == nil && !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// socketInodes adds the inode of every socket pid has open to set.
func socketInodes(pid int, set map[string]bool) error {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, fd := range fds {
		// A descriptor closed since ReadDir reads as an error: skip it.
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			set[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return nil
}

// listeners returns the local addresses of the listening sockets in a
// /proc/net/tcp{,6} table whose inode is in inodes.
func listeners(table string, inodes map[string]bool) ([]string, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // the header line
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen || !inodes[fields[9]] {
			continue
		}
		addr, err := parseProcAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
		out = append(out, addr)
	}
	return out, sc.Err()
}

// parseProcAddr decodes "0100007F:1F90" (IPv4) or its 32-hex-digit IPv6
// form. The kernel prints the address as 32-bit words in host byte order and
// the port in hex.
func parseProcAddr(s string) (string, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(hexIP)
	if !ok || err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return "", fmt.Errorf("bad port in %q", s)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), nil
}

// exited reports whether pid has ended: gone from /proc, or a zombie that
// its parent has not reaped yet.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The command name (field 2) may hold spaces and parentheses; the state
	// follows the last ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
