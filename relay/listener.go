package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// Listener is the side of `webhookd listen`: it keeps a stream open to the
// API for one relay, connecting again with backoff when it drops, and
// forwards each request to a local URL.
type Listener struct {
	APIURL string // the API's base URL (http or https)
	APIKey string
	Name   string // the relay's name: relay://Name
	// ForwardTo is the local receiver's URL.
	ForwardTo string
	// Client forwards the requests; default: one that follows no
	// redirects (a 3xx is the receiver's answer, as for an HTTP endpoint).
	Client *http.Client
	// Forwarded is called after each forwarded request, with its answer
	// (Response.Error when there was none) and how long it took.
	Forwarded func(r Request, a Response, took time.Duration)
	// Status is called with a line about the stream (connected, dropped,
	// connecting again); nil: quiet.
	Status func(line string)
	// MinBackoff and MaxBackoff bound the wait before connecting again;
	// default 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
}

// RefusedError is the API's refusal of the stream (a bad key, a name that
// is not a relay's): connecting again would not help.
type RefusedError struct {
	Status int
	Body   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the API refused the stream: %d %s", e.Status, strings.TrimSpace(e.Body))
}

// Run keeps the stream until ctx ends (nil), or the API refuses it
// (*RefusedError).
func (l *Listener) Run(ctx context.Context) error {
	minWait, maxWait := l.MinBackoff, l.MaxBackoff
	if minWait <= 0 {
		minWait = 250 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 30 * time.Second
	}
	wait := minWait
	for {
		connected, err := l.once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var refused *RefusedError
		if errors.As(err, &refused) {
			return err
		}
		if connected {
			wait = minWait
		}
		// Full jitter, so that listeners dropped together do not come back
		// together.
		d := time.Duration(rand.Int64N(int64(wait))) + minWait/2
		l.status(fmt.Sprintf("stream lost (%v); connecting again in %s", err, d.Round(time.Millisecond)))
		if !sleep(ctx, d) {
			return nil
		}
		wait = min(2*wait, maxWait)
	}
}

// once connects and serves the stream until it drops; connected says it
// was open for a while.
func (l *Listener) once(ctx context.Context) (connected bool, err error) {
	u, err := l.streamURL()
	if err != nil {
		return false, &RefusedError{Body: err.Error()}
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + l.APIKey}, "User-Agent": {"webhookd-listen"}}})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
			}
			return false, &RefusedError{Status: resp.StatusCode, Body: string(body)}
		}
		return false, err
	}
	conn.SetReadLimit(maxMessage)
	defer conn.CloseNow()
	l.status("connected: relay://" + l.Name + " forwards to " + l.ForwardTo)
	opened := time.Now()
	defer func() { connected = time.Since(opened) > time.Second }()
	var running sync.WaitGroup
	defer running.Wait()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for {
		var m Request
		if err := wsjson.Read(sctx, conn, &m); err != nil {
			if ctx.Err() != nil {
				conn.Close(websocket.StatusNormalClosure, "listen stopped")
			}
			return true, err
		}
		running.Go(func() {
			start := time.Now()
			a := l.forward(sctx, m)
			if err := wsjson.Write(sctx, conn, a); err != nil {
				cancel() // its request fails on the server's side as the stream ends
			}
			if l.Forwarded != nil {
				l.Forwarded(m, a, time.Since(start))
			}
		})
	}
}

// streamURL is the stream's ws:// or wss:// URL.
func (l *Listener) streamURL() (string, error) {
	u, err := url.Parse(strings.TrimSuffix(l.APIURL, "/"))
	if err != nil {
		return "", fmt.Errorf("API URL: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("API URL %q: want http:// or https://", l.APIURL)
	}
	return u.String() + "/v1/relays/" + url.PathEscape(l.Name) + "/stream", nil
}

// hopHeaders are not forwarded: the local request has its own.
var hopHeaders = []string{"Connection", "Content-Length", "Host", "Keep-Alive", "Transfer-Encoding", "Upgrade"}

// forward makes m's request to the local receiver and returns its answer.
func (l *Listener) forward(ctx context.Context, m Request) Response {
	ctx, cancel := context.WithDeadline(ctx, m.Deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, m.Method, l.ForwardTo, bytes.NewReader(m.Body))
	if err != nil {
		return Response{ID: m.ID, Error: err.Error()}
	}
	for k, v := range m.Header {
		req.Header[k] = v
	}
	for _, k := range hopHeaders {
		req.Header.Del(k)
	}
	c := l.Client
	if c == nil {
		c = noRedirects
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var ne net.Error
		timeout := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
		return Response{ID: m.ID, Error: m.Method + " " + l.ForwardTo + ": " + err.Error(), Timeout: timeout}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return Response{ID: m.ID, Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// noRedirects is the default client of Listener.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (l *Listener) status(line string) {
	if l.Status != nil {
		l.Status(line)
	}
}
