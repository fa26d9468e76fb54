package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// memory: a fresh nora-breaker's idle RSS, then its RSS while holding
// opts.idleConns keep-alive client connections, each of which has made one
// proxied 1 KiB request and then stays open and idle.
func memory(e *env, rep *report) error {
	idle, held := series{}, series{}
	for r := range e.opts.memRounds {
		n, err := e.startNora(fmt.Sprintf("memory-%d", r), 0)
		if err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond) // let start-up garbage be collected
		m, err := readMem(n.proc.pid())
		if err != nil {
			return err
		}
		idle.add("nora-breaker", float64(m.rss))
		conns, err := openIdle(n.listen, e.smallURL(), e.opts.idleConns)
		if err == nil {
			time.Sleep(500 * time.Millisecond)
			m, err = readMem(n.proc.pid())
			held.add("nora-breaker", float64(m.rss))
		}
		for _, c := range conns {
			c.Close()
		}
		e.stopNora(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: memory round %d: idle %s, with %d connections %s\n", r+1,
			format(unitBytes, idle["nora-breaker"][r]), e.opts.idleConns, format(unitBytes, float64(m.rss)))
	}
	const sec = "memory (RSS)"
	i := row{section: sec, target: "nora-breaker", figure: "idle", unit: unitBytes, value: idle.med("nora-breaker"),
		goal: "≤ 30 MiB"}
	i.met = verdict(i.value <= 30<<20)
	h := row{section: sec, target: "nora-breaker", figure: fmt.Sprintf("%d idle keep-alive conns", e.opts.idleConns),
		unit: unitBytes, value: held.med("nora-breaker"), goal: "≤ 200 MiB (at 5,000)"}
	h.met = verdict(h.value <= 200<<20)
	rep.add(i, h)
	return nil
}

// openIdle opens n connections to the proxy, 64 at a time; each sends one
// absolute-form GET, reads the whole answer and is then left open.
func openIdle(proxyAddr, target string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
			if err := oneRequest(c, target); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var out []net.Conn
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	if err := <-errs; err != nil {
		return out, fmt.Errorf("opening %d idle connections: %w", n, err)
	}
	return out, nil
}

func oneRequest(c net.Conn, target string) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	req, _ := http.NewRequest(http.MethodGet, target, nil)
	if err := req.WriteProxy(c); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Close {
		return fmt.Errorf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	return nil
}
