package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// freeAddr returns 127.0.0.1:<port> for a port that was free a moment ago.
// Another process could take it before it is used; on a bench machine that
// is rare enough, and the start-up of whatever uses it fails loudly if so.
func freeAddr() (string, error) {
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
