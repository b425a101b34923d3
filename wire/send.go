package wire

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/tracing"
)

// MaxResponseBody is how much of a response body an attempt keeps.
const MaxResponseBody = 8 << 10

// Response is what one attempt got back. Err is set when there was no
// response at all (connect, DNS or TLS error, timeout, blocked address);
// then StatusCode and Header are ignored.
type Response struct {
	StatusCode int
	Header     http.Header
	Err        error
}

// Sender sends signed deliveries with Client, reading a response's body
// for at most BodyTimeout after its headers. With a Tracer, each request
// carries the traceparent of the span in Send's context (the attempt's),
// so the receiver's span is its child; nil sends none.
type Sender struct {
	Client      *http.Client
	BodyTimeout time.Duration
	Tracer      *tracing.Tracer
}

// Send signs ev's body (Event.Body) with secrets (the endpoint's, the current
// one first) as of a.StartedAt, posts it to a.URL, and completes a —
// whose delivery, number, request id, URL, trigger and start the caller
// set — with what happened.
func (s Sender) Send(ctx context.Context, ev webhookd.Event, secrets []string, a webhookd.Attempt) (webhookd.Attempt, Response) {
	body, err := ev.Body()
	if err != nil {
		a.RequestHeaders, a.ResponseHeaders = map[string]string{}, map[string]string{}
		return Failed(a, err)
	}
	return s.SendBody(ctx, ev, body, nil, secrets, a)
}

// SendBody is Send with the body given (an endpoint's transformation's):
// it is what is signed and sent. headers are added to the request before
// webhookd's own, which they cannot replace but User-Agent (package
// transform refuses the signature's and HTTP's own).
func (s Sender) SendBody(ctx context.Context, ev webhookd.Event, body []byte, headers map[string]string, secrets []string,
	a webhookd.Attempt) (webhookd.Attempt, Response) {
	a.RequestHeaders, a.ResponseHeaders = map[string]string{}, map[string]string{}
	sig, err := SignatureHeader(secrets, ev.ID, a.StartedAt, body)
	if err != nil {
		return Failed(a, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, bytes.NewReader(body))
	if err != nil {
		return Failed(a, err)
	}
	h := req.Header
	h.Set("User-Agent", webhookd.UserAgent())
	for k, v := range headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", ev.ID)
	h.Set("webhook-timestamp", strconv.FormatInt(a.StartedAt.Unix(), 10))
	h.Set("webhook-signature", sig)
	h.Set("X-Event-Id", ev.ID)
	h.Set("X-Event-Type", ev.Type)
	h.Set("X-Delivery-Attempt", strconv.Itoa(a.Number))
	h.Set("X-Request-Id", a.RequestID)
	s.Tracer.Inject(ctx, h)
	for k := range h {
		a.RequestHeaders[k] = h.Get(k)
	}

	start := time.Now()
	resp, err := s.Client.Do(req)
	if err != nil {
		a.DurationMS = time.Since(start).Milliseconds()
		return Failed(a, err)
	}
	defer resp.Body.Close()
	a.StatusCode = &resp.StatusCode
	for k := range resp.Header {
		a.ResponseHeaders[k] = StorableText(resp.Header.Get(k), MaxResponseBody)
	}
	a.ResponseBody = s.readBody(resp)
	a.DurationMS = time.Since(start).Milliseconds()
	return a, Response{StatusCode: resp.StatusCode, Header: resp.Header}
}

// Failed completes an attempt that got no response.
func Failed(a webhookd.Attempt, err error) (webhookd.Attempt, Response) {
	msg := StorableText(DescribeError(err), MaxResponseBody) // it may quote what the receiver sent
	a.Error = &msg
	return a, Response{Err: err}
}

// readBody keeps the first 8 KiB of the body as text PostgreSQL can store
// (valid UTF-8, no NUL), reading for at most BodyTimeout.
func (s Sender) readBody(resp *http.Response) string {
	timer := time.AfterFunc(s.BodyTimeout, func() { resp.Body.Close() })
	defer timer.Stop()
	// A few bytes more show whether a rune crosses the cut.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody+utf8.UTFMax-1))
	return StorableText(string(raw), MaxResponseBody)
}

// StorableText is s as text PostgreSQL stores — NULs dropped, bytes that
// are not UTF-8 replaced with U+FFFD — cut on a rune boundary to at most
// limit bytes.
func StorableText(s string, limit int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(cutText(s, limit), "\x00", ""), "\uFFFD")
	return cutText(s, limit) // replacement characters can grow it
}

// cutText cuts s to at most limit bytes, before the rune that crosses the
// limit, if any.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > limit-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if !utf8.RuneStart(s[cut]) { // no rune there: bytes that are not UTF-8
		cut = limit
	}
	return s[:cut]
}
