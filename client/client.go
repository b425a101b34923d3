package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Version is this client's version, sent in its User-Agent.
const Version = "0.1.0"

// maxResponseBytes bounds how much of an answer is read.
const maxResponseBytes = 32 << 20

// timeLayout is how times are sent: RFC 3339 in UTC.
const timeLayout = time.RFC3339Nano

// Client calls webhookd's API. It is safe for concurrent use; goroutines
// sharing one Client share its pacing.
type Client struct {
	base      *url.URL
	apiKey    string
	http      *http.Client
	log       *slog.Logger
	retry     RetryPolicy
	userAgent string
	pace      *pacer
	now       func() time.Time
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc (default: a client of its own
// with no overall timeout; each try is bounded by RetryPolicy.PerTryTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithLogger logs retries and pacing waits at debug level, and calls given
// up at warn level, on l (default: no logging). API keys and bodies are
// never logged.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithRetryPolicy replaces DefaultRetryPolicy; zero fields keep their
// defaults.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *Client) { c.retry = p.withDefaults() } }

// WithUserAgent appends suffix (e.g. "billing-service/1.4") to the
// User-Agent "webhookd-go/<Version>".
func WithUserAgent(suffix string) Option {
	return func(c *Client) {
		if suffix != "" {
			c.userAgent += " " + suffix
		}
	}
}

// New returns a Client for the API at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhookd client: base URL %q is not an absolute http(s) URL", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("webhookd client: API key is empty")
	}
	c := &Client{base: u, apiKey: apiKey, http: &http.Client{}, log: slog.New(slog.DiscardHandler),
		retry: DefaultRetryPolicy, userAgent: "webhookd-go/" + Version, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	c.pace = &pacer{now: c.now}
	return c, nil
}

// CallOption changes one call.
type CallOption func(*request)

// WithIdempotencyKey makes a mutating call use key instead of a new UUIDv4.
// Use it to make an operation idempotent across processes or restarts (the
// same key for the same logical operation); the API remembers a key for the
// project's idempotency TTL (24h by default).
func WithIdempotencyKey(key string) CallOption { return func(r *request) { r.idempotencyKey = key } }

// IfMatch makes UpdateEndpoint apply only while the endpoint still has this
// version; otherwise it fails with ErrVersionMismatch.
func IfMatch(version int) CallOption {
	return func(r *request) { r.header.Set("If-Match", fmt.Sprintf("%q", fmt.Sprint(version))) }
}

// retryMode says which failures a call may be retried after.
type retryMode int

const (
	// retrySafe: the call may run twice with the same effect (GET, PATCH,
	// DELETE, or a POST carrying an Idempotency-Key).
	retrySafe retryMode = iota
	// retryRefused: a POST the API does not deduplicate; retried only when
	// the API certainly did not act on it (429, or no connection made).
	retryRefused
)

type request struct {
	method, path   string
	query          url.Values
	body           []byte
	idempotent     bool // send an Idempotency-Key
	idempotencyKey string
	header         http.Header
	mode           retryMode
	deleteCall     bool // a 404 on a retry means an earlier try deleted it
}

func newRequest(method, path string, opts []CallOption) *request {
	r := &request{method: method, path: path, header: http.Header{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// post builds a mutating POST that carries an Idempotency-Key.
func post(path string, body any, opts []CallOption) (*request, error) {
	r := newRequest(http.MethodPost, path, opts)
	r.idempotent = true
	return r, r.setBody(body)
}

func (r *request) setBody(v any) error {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("webhookd client: encode request: %w", err)
	}
	r.body = b
	return nil
}

// do runs r, retrying as its mode and the policy allow, and decodes a 2xx
// answer's JSON into out (when out is not nil).
func (c *Client) do(ctx context.Context, r *request, out any) error {
	if r.idempotent && r.idempotencyKey == "" {
		// One key per logical operation: made once here, sent on every try.
		r.idempotencyKey = uuid.NewString()
	}
	var last *Error
	for attempt := 1; ; attempt++ {
		if err := c.pace.wait(ctx); err != nil {
			return c.stopped(r, err, last)
		}
		resp, body, err := c.send(ctx, r)
		c.pace.done(resp)
		if err == nil && resp.StatusCode < 300 {
			if out == nil || len(body) == 0 || resp.StatusCode == http.StatusNoContent {
				return nil
			}
			if err := json.Unmarshal(body, out); err != nil {
				return fmt.Errorf("webhookd client: %s %s: decode %d answer: %w", r.method, r.path, resp.StatusCode, err)
			}
			return nil
		}
		if err == nil { // a whole answer: the call's error carries it even if ctx ended meanwhile
			last = errorFromResponse(resp, body, attempt)
		}
		if ctx.Err() != nil {
			return c.stopped(r, ctx.Err(), last)
		}
		var wait time.Duration
		var retry bool
		if err != nil {
			retry = r.mode == retrySafe || isDialError(err)
			wait = c.retry.backoff(attempt)
		} else {
			if r.deleteCall && attempt > 1 && resp.StatusCode == http.StatusNotFound {
				return nil // an earlier try deleted it and its answer was lost
			}
			retry = last.Temporary() && (r.mode == retrySafe || resp.StatusCode == http.StatusTooManyRequests)
			wait = c.retry.backoff(attempt)
			if ra, ok := parseRetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
				if ra > c.retry.MaxRetryAfter {
					retry = false
				}
				wait = afterRetryAfter(ra)
			}
			err = last
		}
		if !retry || attempt >= c.retry.MaxAttempts {
			return c.gaveUp(r, attempt, err, last)
		}
		if dl, ok := ctx.Deadline(); ok && c.now().Add(wait).After(dl) {
			return c.gaveUp(r, attempt, err, last) // no time left for another try
		}
		c.log.DebugContext(ctx, "webhookd client: retrying", "method", r.method, "path", r.path,
			"attempt", attempt, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return c.stopped(r, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// send makes one try and reads its answer. It returns the response and its
// body, or an error when no complete answer came.
func (c *Client) send(ctx context.Context, r *request) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.retry.PerTryTimeout)
	defer cancel()
	u := *c.base
	u.Path = c.base.Path + r.path
	u.RawQuery = r.query.Encode()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", r.idempotencyKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil { // the answer broke off: as good as none
		return nil, nil, err
	}
	return resp, b, nil
}

// gaveUp is the error of a call that will not be tried again: the last
// answer's *Error when the last try got one, else the network error.
func (c *Client) gaveUp(r *request, attempts int, err error, last *Error) error {
	if attempts > 1 {
		c.log.Warn("webhookd client: giving up", "method", r.method, "path", r.path, "attempts", attempts, "err", err)
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	if last != nil {
		return fmt.Errorf("webhookd client: %s %s: %d tries: %w (an earlier answer: %w)", r.method, r.path, attempts, err, last)
	}
	return fmt.Errorf("webhookd client: %s %s: %d tries: %w", r.method, r.path, attempts, err)
}

// stopped is the error of a call whose context ended: it matches the
// context's error with errors.Is, and the last answer, if any, with
// errors.As.
func (c *Client) stopped(r *request, ctxErr error, last *Error) error {
	if last != nil {
		return fmt.Errorf("webhookd client: %s %s: %w (last answer: %w)", r.method, r.path, ctxErr, last)
	}
	return fmt.Errorf("webhookd client: %s %s: %w", r.method, r.path, ctxErr)
}

// isDialError reports whether err happened before the request could reach
// the server (no connection made), so even a call the API does not
// deduplicate may be retried.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
