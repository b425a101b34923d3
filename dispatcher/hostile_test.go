package dispatcher_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
)

// rawReceiver is a loopback TCP server that reads each request (headers and
// Content-Length body) and then lets script write whatever bytes it likes.
// A script that holds its connection open is released when the test ends.
func rawReceiver(t testing.TB, script func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() { <-done; c.Close() }()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					script(c, done)
					if req.Close {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}

// answer writes a fixed response and keeps the connection for the next.
func answer(resp string) func(net.Conn, <-chan struct{}) {
	return func(c net.Conn, _ <-chan struct{}) { io.WriteString(c, resp) }
}

// hostileTimeouts are the short timeouts the hostile receivers run into.
func hostileTimeouts(c *dispatcher.Config) {
	c.HTTP.ConnectTimeout = 500 * time.Millisecond
	c.HTTP.ResponseTimeout = time.Second
	c.Schedule = dispatcher.Schedule{time.Hour} // one attempt each
}

// storable holds what every recorded attempt keeps: at most 8 KiB of valid
// UTF-8 without NUL in its body, error and each header.
func storable(t *testing.T, a webhookd.Attempt) {
	t.Helper()
	texts := map[string]string{"response_body": a.ResponseBody, "error": deref2(a.Error)}
	for k, v := range a.ResponseHeaders {
		texts["response header "+k] = v
	}
	for what, s := range texts {
		if len(s) > 8<<10 || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			t.Errorf("%s: %d bytes, valid UTF-8 %v, NUL at %d", what, len(s), utf8.ValidString(s), strings.IndexByte(s, 0))
		}
	}
}

func deref2(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// fiveMB is the body of a receiver that answers far more than is kept.
var fiveMB = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5242880\r\n\r\n" + strings.Repeat("a", 5<<20)

// badText is a 500 whose body is not UTF-8 and holds NULs, and whose
// header value is no text either.
var badText = func() string {
	body := strings.Repeat("\xff\x00a\xc3", 3000)
	return "HTTP/1.1 500 Internal Server Error\r\nX-Bad: a\xffb\xc3\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}()

// bigHeader is a 200 with a 64 KB header.
var bigHeader = "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("h", 64<<10) + "\r\nContent-Length: 2\r\n\r\nok"

// shortBody promises 1000 bytes, sends 10 and closes.
func shortBody(c net.Conn, _ <-chan struct{}) {
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
	c.Close()
}

// TestHostileReceivers: whatever a receiver answers, each attempt ends
// within its timeouts, is recorded with at most 8 KiB of valid text, and
// is classified by its status (or, without one, retried).
func TestHostileReceivers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		status *int   // want this status_code, or none
		state  string // and the delivery in this state
		body   string // and this response_body, when set
		err    string // and this error, when set
	}{
		{"5 MB body", func(t *testing.T) string { return rawReceiver(t, answer(fiveMB)) },
			new(200), webhookd.DeliverySucceeded, strings.Repeat("a", 8<<10), ""},
		{"invalid UTF-8 and NULs", func(t *testing.T) string { return rawReceiver(t, answer(badText)) },
			new(500), webhookd.DeliveryRetrying, "", ""},
		{"a rune across the 8 KiB cut", func(t *testing.T) string {
			body := strings.Repeat("b", 8191) + "é" + strings.Repeat("c", 100)
			return rawReceiver(t, answer("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body))
		}, new(200), webhookd.DeliverySucceeded, strings.Repeat("b", 8191), ""},
		{"NUL in a header", func(t *testing.T) string {
			return rawReceiver(t, answer("HTTP/1.1 200 OK\r\nX-Nul: a\x00b\r\nContent-Length: 0\r\n\r\n"))
		}, nil, webhookd.DeliveryRetrying, "", ""},
		{"64 KB header", func(t *testing.T) string { return rawReceiver(t, answer(bigHeader)) },
			new(200), webhookd.DeliverySucceeded, "ok", ""},
		{"body trickled a byte a second", func(t *testing.T) string {
			return rawReceiver(t, func(c net.Conn, done <-chan struct{}) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					if _, err := io.WriteString(c, "x"); err != nil {
						return
					}
					select {
					case <-tick.C:
					case <-done:
						return
					}
				}
			})
		}, new(200), webhookd.DeliverySucceeded, "", ""},
		{"Content-Length never reached", func(t *testing.T) string {
			return rawReceiver(t, func(c net.Conn, done <-chan struct{}) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
				<-done // and then nothing, with the connection open
			})
		}, new(200), webhookd.DeliverySucceeded, "0123456789", ""},
		{"Content-Length cut short by a close", func(t *testing.T) string { return rawReceiver(t, shortBody) },
			new(200), webhookd.DeliverySucceeded, "0123456789", ""},
		{"TLS handshake that never finishes", func(t *testing.T) string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() { // accept, and say nothing
				var held []net.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					held = append(held, c)
				}
			}()
			return "https://" + ln.Addr().String() + "/hook"
		}, nil, webhookd.DeliveryRetrying, "", "connect timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, hostileTimeouts)
			e.endpoint(tc.url(t), nil)
			id := e.publish("a", 1)[0]
			d := e.waitStatus(id, tc.state, 15*time.Second)
			if len(d.Attempts) != 1 {
				t.Fatalf("%d attempts", len(d.Attempts))
			}
			a := d.Attempts[0]
			storable(t, a)
			// connect + TLS + response headers + body, each bounded.
			if limit := 2*e.cfg.HTTP.ConnectTimeout + 2*e.cfg.HTTP.ResponseTimeout + time.Second; time.Duration(a.DurationMS)*time.Millisecond > limit {
				t.Errorf("attempt took %d ms, over %v", a.DurationMS, limit)
			}
			if deref(a.StatusCode) != deref(tc.status) {
				t.Errorf("status_code %v, want %v (error %q)", deref(a.StatusCode), deref(tc.status), deref2(a.Error))
			}
			if tc.body != "" && a.ResponseBody != tc.body {
				t.Errorf("response_body %d bytes %.40q…, want %d bytes", len(a.ResponseBody), a.ResponseBody, len(tc.body))
			}
			if tc.err != "" && deref2(a.Error) != tc.err {
				t.Errorf("error %q, want %q", deref2(a.Error), tc.err)
			}
			if tc.name == "invalid UTF-8 and NULs" {
				if !strings.HasPrefix(a.ResponseBody, "\uFFFDa\uFFFDa") || a.ResponseHeaders["X-Bad"] != "a\uFFFDb\uFFFD" {
					t.Errorf("body starts %.20q, X-Bad %q: want NULs dropped and bad bytes replaced",
						a.ResponseBody, a.ResponseHeaders["X-Bad"])
				}
			}
		})
	}
}

// TestWorkerHeapStaysFlatAgainstHostileReceivers makes 1,000 attempts
// against receivers answering 5 MB bodies, bytes that are no text, 64 KB
// headers and short bodies, and holds that the worker's heap does not grow
// with them (runtime.ReadMemStats after a GC, before and after; and its
// peak while they run).
func TestWorkerHeapStaysFlatAgainstHostileReceivers(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 attempts; skipped with -short")
	}
	e := newEnv(t, hostileTimeouts)
	for _, url := range []string{rawReceiver(t, answer(fiveMB)), rawReceiver(t, answer(badText)),
		rawReceiver(t, answer(bigHeader)), rawReceiver(t, shortBody)} {
		e.endpoint(url, nil)
	}
	attempted := func() int { return e.count(`SELECT count(*) FROM deliveries WHERE attempts_count > 0`) }
	// Warm up pools and connections first.
	e.publish("warm", 10)
	waitFor(t, time.Minute, "warm-up attempts", func() bool { return attempted() == 40 })
	base := heapAfterGC()

	ctx, stop := context.WithCancel(context.Background())
	peak := make(chan uint64)
	go func() { // sample the heap while the attempts run
		var m runtime.MemStats
		var high uint64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				peak <- high
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				high = max(high, m.HeapInuse)
			}
		}
	}()
	e.publish("a", 250) // × 4 endpoints
	waitFor(t, 3*time.Minute, "1,000 attempts", func() bool { return attempted() == 1040 })
	stop()
	high := <-peak
	after := heapAfterGC()
	t.Logf("heap in use: %d KiB before, %d KiB after, peak %d KiB", base>>10, after>>10, high>>10)
	const slack = 64 << 20
	if after > base+slack || high > base+2*slack {
		t.Fatalf("heap grew from %d KiB to %d KiB (peak %d KiB) over 1,000 hostile attempts", base>>10, after>>10, high>>10)
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
