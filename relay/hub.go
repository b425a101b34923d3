package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// Config configures a Hub. Zero values take the defaults in the comments.
type Config struct {
	// Redis carries requests and answers between processes; required. Its
	// blocking reads hold a connection each (one per stream, one per
	// attempt in flight), so give the Hub a client of its own, not the
	// queue's.
	Redis redis.UniversalClient
	// Wake makes the deliveries of project's relay name that waited for a
	// listener due (storage.WakeRelay, then the queue's wake-up): called
	// when a stream opens and at each heartbeat, so that a wake lost to a
	// race (an attempt that found nobody listening and recorded its wait
	// just after a listener came) is repaired within a heartbeat. nil:
	// nothing is woken (tests).
	Wake func(ctx context.Context, project, name string)
	// Heartbeat is how often a stream refreshes its relay's presence,
	// wakes its deliveries and pings its listener; default 5s. The
	// presence lasts three heartbeats.
	Heartbeat time.Duration
	// InFlight is how many requests one stream has at its listener at
	// once; default 16.
	InFlight int
	// Prefix prefixes the Hub's Redis keys; default "webhookd:relay:".
	Prefix string
	// Logger: default slog.Default().
	Logger *slog.Logger
}

// WithDefaults fills zero values.
func (c Config) WithDefaults() Config {
	if c.Heartbeat == 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.InFlight == 0 {
		c.InFlight = 16
	}
	if c.Prefix == "" {
		c.Prefix = "webhookd:relay:"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Redis == nil:
		return errors.New("relay config: Redis is required")
	case c.Heartbeat < 0:
		return errors.New("relay config: Heartbeat is negative")
	case c.InFlight < 1:
		return errors.New("relay config: InFlight must be at least 1")
	}
	return nil
}

// Hub serves the streams of `webhookd listen` (Serve) in an API process
// and carries attempts to them (RoundTrip, Listening) from a worker.
type Hub struct {
	cfg  Config
	rdb  redis.UniversalClient
	log  *slog.Logger
	ctx  context.Context // ends every stream (Close)
	stop context.CancelFunc

	mu      sync.Mutex
	streams map[string]int // relay key → streams of this process; an entry leaves with its last stream
	closed  bool           // Close was called: no new stream
	running sync.WaitGroup
}

// New returns a Hub.
func New(cfg Config) (*Hub, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Hub{cfg: cfg, rdb: cfg.Redis, log: cfg.Logger, ctx: ctx, stop: stop, streams: map[string]int{}}, nil
}

// Close ends the streams of this process (their listeners connect again,
// to another API process or to this one once it is back) and waits for
// them to finish.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stop()
	h.running.Wait()
}

// admit counts a new stream in running, unless the Hub is closed.
func (h *Hub) admit() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.running.Add(1)
	return true
}

// key is the prefix of relay name of project's keys; the braces keep them
// in one slot of a Redis Cluster.
func (h *Hub) key(project, name string) string {
	return h.cfg.Prefix + "{" + project + ":" + name + "}"
}

func (h *Hub) presenceKey(project, name string) string { return h.key(project, name) + ":listening" }
func (h *Hub) requestsKey(project, name string) string { return h.key(project, name) + ":requests" }
func (h *Hub) answerKey(id string) string              { return h.cfg.Prefix + "answer:" + id }

// presenceTTL is how long a relay's presence lasts without a heartbeat.
func (h *Hub) presenceTTL() time.Duration { return 3 * h.cfg.Heartbeat }

// Listening tells whether a `webhookd listen` is connected to project's
// relay name (a stream in some API process refreshed its presence lately).
func (h *Hub) Listening(ctx context.Context, project, name string) (bool, error) {
	n, err := h.rdb.Exists(ctx, h.presenceKey(project, name)).Result()
	if err != nil {
		return false, fmt.Errorf("relay presence: %w", err)
	}
	return n > 0, nil
}

// ErrNoListener is the error of a relay attempt made while no `webhookd
// listen` is connected to its relay (a person's, which is not held back; or
// one whose listener went away before taking it).
var ErrNoListener = errors.New("no webhookd listen is connected to this relay")

// ListenerError is a listener's answer that carries no response: its local
// receiver could not be reached, or it went away.
type ListenerError struct{ Message string }

func (e *ListenerError) Error() string { return "listener: " + e.Message }

// timeoutError is an attempt that got no answer in time: it wraps
// context.DeadlineExceeded, which wire.DescribeError calls a response
// timeout.
type timeoutError struct{}

func (timeoutError) Error() string { return "relay: no answer from the listener in time" }
func (timeoutError) Unwrap() error { return context.DeadlineExceeded }
func (timeoutError) Timeout() bool { return true }

// defaultWait is how long an attempt whose context has no deadline waits
// for its answer.
const defaultWait = 30 * time.Second

// RoundTrip sends req, whose URL is relay://NAME and whose context names
// the project (webhookd.WithProject), to one of the relay's listeners and
// returns the local receiver's response. Without a listener it fails at
// once (ErrNoListener); without an answer by the context's deadline it
// fails as a timeout; a lost carrier (Redis) fails like a network error.
// The request is taken by one listener only.
func (h *Hub) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	project, name := webhookd.ProjectOf(ctx), req.URL.Host
	if project == "" || !webhookd.ValidRelayName(name) {
		return closeBody(req, fmt.Errorf("relay: %q names no relay of a project", req.URL.Redacted()))
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	if ok, err := h.Listening(ctx, project, name); err != nil || !ok {
		return nil, cmpErr(err, ErrNoListener)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultWait)
	}
	m := Request{ID: newID(), Method: req.Method, Header: req.Header.Clone(), Body: body, Deadline: deadline}
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	queue := h.requestsKey(project, name)
	_, err = h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, queue, payload)
		p.PExpire(ctx, queue, time.Until(deadline)+time.Minute) // a relay nobody takes from does not keep its requests
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	a, err := h.await(ctx, project, name, queue, m.ID, payload, deadline)
	if err != nil {
		return nil, err
	}
	switch {
	case a.Timeout:
		return nil, timeoutError{}
	case a.Error != "":
		return nil, &ListenerError{Message: a.Error}
	}
	return &http.Response{Status: strconv.Itoa(a.Status) + " " + http.StatusText(a.Status), StatusCode: a.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: a.Header, Body: io.NopCloser(bytes.NewReader(a.Body)),
		ContentLength: int64(len(a.Body)), Request: req}, nil
}

// await waits for the answer to request id until deadline, looking every
// second whether the relay still has a listener: a request nobody took
// when the last listener left is taken back and fails at once.
func (h *Hub) await(ctx context.Context, project, name, queue, id string, payload []byte, deadline time.Time) (Response, error) {
	takeBack := func() (bool, error) {
		n, err := h.rdb.LRem(context.WithoutCancel(ctx), queue, 1, payload).Result()
		return n == 1, err
	}
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			takeBack()
			return Response{}, timeoutError{}
		}
		// BLPOP's wait is whole seconds: the last one may pass the
		// deadline by less than a second.
		res, err := h.rdb.BLPop(ctx, time.Second, h.answerKey(id)).Result()
		switch {
		case errors.Is(err, redis.Nil):
			listening, err := h.Listening(ctx, project, name)
			if err != nil || listening {
				continue
			}
			if back, err := takeBack(); err == nil && back {
				return Response{}, ErrNoListener
			}
			continue // a listener took it: its stream answers, if only that it went away
		case err != nil:
			takeBack()
			return Response{}, fmt.Errorf("relay: %w", err)
		}
		var a Response
		if err := json.Unmarshal([]byte(res[1]), &a); err != nil {
			return Response{}, fmt.Errorf("relay: answer: %w", err)
		}
		return a, nil
	}
}

// answer hands a listener's answer to the attempt waiting for it.
func (h *Hub) answer(ctx context.Context, a Response) error {
	payload, err := json.Marshal(a)
	if err != nil {
		return err
	}
	key := h.answerKey(a.ID)
	_, err = h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, key, payload)
		p.Expire(ctx, key, time.Minute) // an attempt that stopped waiting never reads it
		return nil
	})
	return err
}

// cmpErr is err if set, else otherwise.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// closeBody closes req's body (a RoundTripper must, even on error) and
// returns err.
func closeBody(req *http.Request, err error) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, err
}

// newID returns a random request id.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
