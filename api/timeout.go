package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// requestIDKey carries a request's id from bounded to the handler, so that
// a timeout answer and the handler's own name the same request.
type requestIDKey struct{}

// requestIDOf returns the id bounded gave r, or a new one.
func requestIDOf(r *http.Request) string {
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok {
		return id
	}
	return storage.NewRequestID()
}

// bounded answers 503 timeout, with Retry-After, to a request h has not
// answered within RequestTimeout (SPEC §7). h goes on: its context is not
// cancelled by the bound (nor by the client going away), only by
// RequestTimeout + workGrace, so work that commits late is what a repeat
// with the same Idempotency-Key replays, and work that fails releases
// the key. h writes to a buffer, copied to the client when h finishes in
// time; the body is read before h starts (up to the largest body a route
// takes, plus one byte so an oversized one is still refused), so h never
// touches the connection once the timeout has answered.
func (s *Server) bounded(h http.Handler) (http.Handler, error) {
	timeouts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhookd_api_timeouts_total",
		Help: "API requests answered 503 timeout because they took longer than WEBHOOKD_REQUEST_TIMEOUT (their work went on).",
	})
	if err := s.cfg.Metrics.Register(timeouts); err != nil {
		return nil, err
	}
	maxBody := max(s.cfg.MaxBatchBytes, s.cfg.MaxPayloadBytes) + 1
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := storage.NewRequestID()
		ctx, cancel := context.WithTimeout(context.WithValue(context.WithoutCancel(r.Context()), requestIDKey{}, id),
			s.cfg.RequestTimeout+workGrace)
		timer := time.NewTimer(s.cfg.RequestTimeout)
		defer timer.Stop()
		inner := r.WithContext(ctx)
		switch {
		case r.ContentLength >= maxBody: // every route refuses it by its length, unread
			inner.Body = http.NoBody
		case r.Body != nil && r.Body != http.NoBody:
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
			if err != nil { // the client went away or sent a broken body: h reads the same error
				inner.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			} else {
				inner.Body = io.NopCloser(bytes.NewReader(body))
			}
		}
		bw := &bufferedWriter{header: http.Header{}, flushed: make(chan struct{})}
		// done hands h's panic (or nil) to this goroutine while it waits;
		// once it has stopped waiting (answered, timed out, client gone),
		// h's goroutine logs a late panic itself.
		var (
			done    = make(chan any, 1)
			mu      sync.Mutex
			waiting = true
		)
		stopWaiting := func(why string) {
			mu.Lock()
			waiting = false
			mu.Unlock()
			select {
			case p := <-done: // h finished just now
				if p != nil && p != http.ErrAbortHandler {
					s.log.Error("api handler panicked "+why, "request_id", id, "panic", p)
				}
			default:
			}
		}
		s.work.Add(1)
		s.warm.Go(func() {
			defer s.work.Done()
			defer cancel()
			defer func() {
				p := recover()
				mu.Lock()
				defer mu.Unlock()
				if waiting {
					done <- p
				} else if p != nil && p != http.ErrAbortHandler {
					s.log.Error("api handler panicked after its answer", "request_id", id, "panic", p)
				}
			}()
			h.ServeHTTP(bw, inner)
		})
		select {
		case p := <-done:
			if p != nil {
				panic(p) // as if h had run here: net/http logs it and closes the connection
			}
			bw.copyTo(w)
		case <-bw.flushed: // answered; h goes on with work the client need not wait for
			bw.copyTo(w)
			stopWaiting("after its answer was sent")
		case <-timer.C:
			timeouts.Inc()
			w.Header().Set("X-Request-Id", id)
			w.Header().Set("Retry-After", "5")
			_, body := errorResponse(&webhookd.Error{Code: webhookd.CodeTimeout, Message: fmt.Sprintf(
				"the request took longer than %s; it may still complete: repeat it with the same Idempotency-Key to get its result",
				s.cfg.RequestTimeout)}, id)
			writeBody(w, http.StatusServiceUnavailable, body)
			stopWaiting("after its request timed out") // a late panic is logged, not fatal
		case <-r.Context().Done(): // the client went away: nobody to answer; the work goes on
			stopWaiting("after its client went away")
		}
	}), nil
}

// workGrace is how long a request's work may go on past RequestTimeout
// before its context is cancelled.
const workGrace = time.Minute

// bufferedWriter keeps a response until it can be sent whole: when the
// handler returns, or when it flushes (the answer is complete and the
// handler goes on with work the client need not wait for).
type bufferedWriter struct {
	header  http.Header
	flushed chan struct{} // closed by the first Flush
	mu      sync.Mutex
	code    int
	body    bytes.Buffer
	sent    bool // copied to the client: later writes go nowhere
}

func (b *bufferedWriter) Header() http.Header { return b.header }

func (b *bufferedWriter) WriteHeader(code int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if b.sent {
		return 0, http.ErrHandlerTimeout
	}
	return b.body.Write(p)
}

// Flush marks the response complete. The handler must not change its
// headers afterwards.
func (b *bufferedWriter) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flushed != nil && !b.sent {
		select {
		case <-b.flushed:
		default:
			close(b.flushed)
		}
	}
}

func (b *bufferedWriter) copyTo(w http.ResponseWriter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent {
		return
	}
	b.sent = true
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.code == 0 {
		b.code = http.StatusOK
	}
	w.WriteHeader(b.code)
	w.Write(b.body.Bytes())
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
