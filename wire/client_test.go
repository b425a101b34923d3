package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/netguard"
)

// Every test here talks to loopback listeners only.

func post(t *testing.T, c *http.Client, target string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

func TestHTTPConfigWithDefaults(t *testing.T) {
	tests := []struct {
		in, want HTTPConfig
	}{
		{HTTPConfig{}, HTTPConfig{ConnectTimeout: 10 * time.Second, ResponseTimeout: 30 * time.Second}},
		{
			HTTPConfig{ConnectTimeout: time.Second, ResponseTimeout: 2 * time.Second, AllowPrivateNetworks: true},
			HTTPConfig{ConnectTimeout: time.Second, ResponseTimeout: 2 * time.Second, AllowPrivateNetworks: true},
		},
	}
	for _, tt := range tests {
		if got := tt.in.WithDefaults(); got != tt.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	if err := (HTTPConfig{}).Validate(); err != nil {
		t.Errorf("Validate() on zero config: %v", err)
	}
	if err := (HTTPConfig{ResponseTimeout: -time.Second}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "ResponseTimeout:") {
		t.Errorf("Validate() = %v, want an error naming ResponseTimeout", err)
	}
}

func TestNewHTTPClientTransport(t *testing.T) {
	c := NewHTTPClient(HTTPConfig{ConnectTimeout: 3 * time.Second, ResponseTimeout: 4 * time.Second})
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport is %T", c.Transport)
	}
	if tr.Proxy != nil {
		t.Error("transport uses a proxy")
	}
	if tr.TLSHandshakeTimeout != 3*time.Second || tr.ResponseHeaderTimeout != 4*time.Second {
		t.Errorf("TLSHandshakeTimeout %v, ResponseHeaderTimeout %v; want 3s, 4s", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout)
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	resp, err := post(t, NewHTTPClient(HTTPConfig{AllowPrivateNetworks: true}), srv.URL+"/hook")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/elsewhere" {
		t.Errorf("got %d Location %q, want 302 /elsewhere", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("redirect followed %d times", n)
	}
}

func TestClientBlocksLoopback(t *testing.T) {
	var conns, requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	_, err := post(t, NewHTTPClient(HTTPConfig{}), srv.URL)
	var blocked *netguard.BlockedAddressError
	if !errors.As(err, &blocked) || blocked.Addr != "127.0.0.1" {
		t.Fatalf("error = %v, want BlockedAddressError for 127.0.0.1", err)
	}
	if got, want := DescribeError(err), "destination address 127.0.0.1 is not allowed"; got != want {
		t.Errorf("DescribeError = %q, want %q", got, want)
	}
	srv.Close() // waits for connections, so the counts below are final
	if conns.Load() != 0 || requests.Load() != 0 {
		t.Errorf("server saw %d connections and %d requests, want none", conns.Load(), requests.Load())
	}
}

// silentListener accepts connections and never answers on them.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

func TestClientResponseTimeout(t *testing.T) {
	addr := silentListener(t)
	c := NewHTTPClient(HTTPConfig{ResponseTimeout: 300 * time.Millisecond, AllowPrivateNetworks: true})
	start := time.Now()
	_, err := post(t, c, "http://"+addr+"/hook")
	if err == nil {
		t.Fatal("no error from a server that never answers")
	}
	if got := DescribeError(err); got != "response timeout" {
		t.Errorf("DescribeError(%v) = %q, want %q", err, got, "response timeout")
	}
	if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
		t.Errorf("gave up after %v, before the 300ms response timeout", elapsed)
	}
}

func TestClientConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	_, err = post(t, NewHTTPClient(HTTPConfig{AllowPrivateNetworks: true}), "http://"+addr+"/hook")
	if got := DescribeError(err); got != "connection refused" {
		t.Errorf("DescribeError(%v) = %q, want %q", err, got, "connection refused")
	}
}

// TestClientConnectTimeout cannot use a blackhole address (no traffic may
// leave loopback), so it gives the dialer a 1ns budget against a loopback
// listener: the dialer's own deadline expires before connect, which is the
// error a real connect timeout produces.
func TestClientConnectTimeout(t *testing.T) {
	addr := silentListener(t)
	c := NewHTTPClient(HTTPConfig{ConnectTimeout: time.Nanosecond, AllowPrivateNetworks: true})
	_, err := post(t, c, "http://"+addr+"/hook")
	if got := DescribeError(err); got != "connect timeout" {
		t.Errorf("DescribeError(%v) = %q, want %q", err, got, "connect timeout")
	}
}

func TestClientTLSError(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)

	_, err := post(t, NewHTTPClient(HTTPConfig{AllowPrivateNetworks: true}), srv.URL)
	want := "tls error: tls: failed to verify certificate: "
	if got := DescribeError(err); !strings.HasPrefix(got, want) {
		t.Errorf("DescribeError(%v) = %q, want it to start with %q", err, got, want)
	}
}

type fakeTimeout struct{}

func (fakeTimeout) Error() string   { return "net/http: TLS handshake timeout" }
func (fakeTimeout) Timeout() bool   { return true }
func (fakeTimeout) Temporary() bool { return true }

func TestDescribeError(t *testing.T) {
	inURL := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://hooks.example/x?token=secret", Err: err}
	}
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"blocked", inURL(dial(&netguard.BlockedAddressError{Addr: "10.0.0.1"})), "destination address 10.0.0.1 is not allowed"},
		{"dns not found", inURL(dial(&net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true})), "dns error: lookup nope.invalid: no such host"},
		{"dns timeout", inURL(dial(&net.DNSError{Err: "i/o timeout", Name: "slow.example", IsTimeout: true})), "dns error: lookup slow.example: i/o timeout"},
		{"dial deadline", inURL(dial(os.ErrDeadlineExceeded)), "connect timeout"},
		{"connect ETIMEDOUT", inURL(dial(os.NewSyscallError("connect", syscall.ETIMEDOUT))), "connect timeout"},
		{"tls handshake timeout", inURL(fakeTimeout{}), "connect timeout"},
		{"read deadline", inURL(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), "response timeout"},
		{"context deadline", inURL(fmt.Errorf("waiting: %w", context.DeadlineExceeded)), "response timeout"},
		{"refused", inURL(dial(os.NewSyscallError("connect", syscall.ECONNREFUSED))), "connection refused"},
		{"not tls", inURL(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), "tls error: tls: first record does not look like a TLS handshake"},
		{"unknown authority", inURL(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), "tls error: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"bare x509", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "a.example"}, "tls error: x509: certificate is not valid for any names, but wanted to match a.example"},
		{"peer alert", inURL(&net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}), "tls error: remote error: tls: bad certificate"},
		{"other, url stripped", inURL(io.EOF), "EOF"},
		{"other", errors.New("boom"), "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DescribeError(tt.err); got != tt.want {
				t.Errorf("DescribeError(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
