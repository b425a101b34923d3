package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// freeAddr returns 127.0.0.1:<port> for a port that was free a moment ago
// and that it never returned before in this process. It picks below the
// kernel's ephemeral range (ip_local_port_range), where the outgoing
// connections of everything running (webhookd's own to PostgreSQL and
// Redis among them) never take a port: a port from the ephemeral range,
// free a moment ago, was now and then some connection's by the time
// webhookd bound it ("address already in use"). And a port is handed out
// once: the chaos soak takes a dozen before it starts anything, and two
// picks of the same one (free both times, nothing bound yet) left a serve
// process unable to bind its API, restarted for ever (CI, seed 699732013).
func freeAddr() (string, error) {
	for range 100 {
		addr, err := pickAddr()
		if err != nil {
			return "", err
		}
		handedMu.Lock()
		again := handed[addr]
		handed[addr] = true
		handedMu.Unlock()
		if !again {
			return addr, nil
		}
	}
	return "", errors.New("find a free port: every pick was one handed out before")
}

var (
	handedMu sync.Mutex
	handed   = map[string]bool{} // addresses freeAddr returned
)

// pickAddr is freeAddr's pick, handed out before or not.
func pickAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const floor = 10000
	for range 100 {
		if low <= floor {
			break
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(floor+rand.IntN(low-floor))))
		if err == nil {
			defer ln.Close()
			return ln.Addr().String(), nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freePort is freeAddr's port alone.
func freePort() (int, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

// loopbackOnly is a net.Dialer Control that refuses any address that is not
// on loopback, so no request of the tool can leave the machine.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing to connect to %s: not a loopback address", address)
	}
	return nil
}

// newLoopbackClient returns an HTTP client for load: no proxy, many idle
// keep-alive connections, dialling loopback addresses only.
func newLoopbackClient(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     2 * time.Minute,
			DisableCompression:  true,
		},
	}
}

// get fetches url with a short timeout and returns its status and body.
func get(ctx context.Context, client *http.Client, url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := readAll(resp)
	return resp.StatusCode, body, err
}
