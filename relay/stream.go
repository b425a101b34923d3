package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/redis/go-redis/v9"
)

// Serve holds the stream of a `webhookd listen` for project's relay name
// (GET /v1/relays/{name}/stream, authenticated by the caller) until the
// listener or the Hub closes it. While it is open the relay has a
// listener: the stream takes the relay's requests, at most InFlight at a
// time, sends them to the listener and hands its answers back. Requests it
// took and that the listener did not answer when the stream ends are
// answered with an error (the attempt fails, and is retried).
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, project, name string) {
	// The server's read and write timeouts would cut a stream that lasts:
	// the stream keeps itself alive with pings instead.
	if !h.admit() {
		http.Error(w, "webhookd is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer h.running.Done()
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the request
	}
	conn.SetReadLimit(maxMessage)
	s := &stream{hub: h, conn: conn, project: project, name: name, pending: map[string]struct{}{},
		slots: make(chan struct{}, h.cfg.InFlight)}
	s.run()
}

// stream is one listener's connection.
type stream struct {
	hub           *Hub
	conn          *websocket.Conn
	project, name string
	slots         chan struct{} // one per request at the listener

	mu      sync.Mutex
	pending map[string]struct{} // requests sent, not yet answered
}

func (s *stream) run() {
	h := s.hub
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	if err := h.join(ctx, s.project, s.name); err != nil {
		h.log.Warn("relay stream refused: its presence could not be recorded", "project_id", s.project, "relay", s.name, "err", err)
		s.conn.Close(websocket.StatusTryAgainLater, "relay unavailable")
		return
	}
	h.log.Info("relay listener connected", "project_id", s.project, "relay", s.name)
	// The relay has no listener here from the moment the stream ends, not
	// once its goroutines are done: a delivery due meanwhile waits.
	leave := sync.OnceFunc(func() { h.leave(s.project, s.name) })
	context.AfterFunc(ctx, leave)
	var done sync.WaitGroup
	done.Go(func() { s.read(ctx); cancel() })
	done.Go(func() { s.beat(ctx); cancel() })
	s.pump(ctx)
	cancel()
	reason, code := "listener disconnected", websocket.StatusNormalClosure
	if h.ctx.Err() != nil {
		reason, code = "webhookd is shutting down", websocket.StatusGoingAway
	}
	s.conn.Close(code, reason)
	done.Wait()
	leave()
	s.mu.Lock()
	left := s.pending
	s.pending = nil
	s.mu.Unlock()
	for id := range left {
		h.answer(context.Background(), Response{ID: id, Error: reason})
	}
	h.log.Info("relay listener disconnected", "project_id", s.project, "relay", s.name, "unanswered", len(left))
}

// pump takes the relay's requests and sends them to the listener.
func (s *stream) pump(ctx context.Context) {
	h := s.hub
	queue := h.requestsKey(s.project, s.name)
	for {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		res, err := h.rdb.BLPop(ctx, time.Second, queue).Result()
		if err == nil && ctx.Err() != nil {
			// Taken as the stream ended (the wait does not end with ctx):
			// back at the head of the queue, for another listener, or for
			// its attempt to take back.
			h.rdb.LPush(context.WithoutCancel(ctx), queue, res[1])
			return
		}
		if err != nil {
			<-s.slots
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, redis.Nil) {
				h.log.Debug("relay stream: taking requests failed; trying again", "relay", s.name, "err", err)
				if !sleep(ctx, time.Second) { // Redis down: look again in a second, not in a loop
					return
				}
			}
			continue
		}
		var m Request
		if err := json.Unmarshal([]byte(res[1]), &m); err != nil || !time.Now().Before(m.Deadline) {
			<-s.slots // garbled, or its attempt stopped waiting: not forwarded
			continue
		}
		s.mu.Lock()
		s.pending[m.ID] = struct{}{}
		s.mu.Unlock()
		if err := wsjson.Write(ctx, s.conn, m); err != nil {
			return // the stream is gone; run answers what was pending
		}
	}
}

// read hands the listener's answers to the attempts waiting for them.
func (s *stream) read(ctx context.Context) {
	for {
		var a Response
		if err := wsjson.Read(ctx, s.conn, &a); err != nil {
			return
		}
		s.mu.Lock()
		_, ok := s.pending[a.ID]
		delete(s.pending, a.ID)
		s.mu.Unlock()
		if !ok {
			continue // not a request of this stream
		}
		<-s.slots
		if err := s.hub.answer(ctx, a); err != nil {
			s.hub.log.Debug("relay stream: an answer was lost; its attempt fails and is retried", "relay", s.name, "err", err)
		}
	}
}

// beat keeps the relay's presence, wakes its waiting deliveries and pings
// the listener every heartbeat; a listener that does not answer a ping
// within a heartbeat ends the stream.
func (s *stream) beat(ctx context.Context) {
	h := s.hub
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.present(ctx, s.project, s.name); err != nil {
			h.log.Debug("relay stream: presence not refreshed", "relay", s.name, "err", err)
		}
		h.wake(ctx, s.project, s.name)
		pctx, cancel := context.WithTimeout(ctx, h.cfg.Heartbeat)
		err := s.conn.Ping(pctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// join records a stream of project's relay name: its presence, then the
// wake of the deliveries that waited for a listener.
func (h *Hub) join(ctx context.Context, project, name string) error {
	h.mu.Lock()
	h.streams[h.key(project, name)]++
	h.mu.Unlock()
	if err := h.present(ctx, project, name); err != nil {
		h.leave(project, name)
		return err
	}
	h.wake(ctx, project, name)
	return nil
}

// leave forgets a stream; the relay's presence goes with this process's
// last stream of it (another process's streams set it again at their next
// heartbeat).
func (h *Hub) leave(project, name string) {
	k := h.key(project, name)
	h.mu.Lock()
	h.streams[k]--
	last := h.streams[k] == 0
	if last {
		delete(h.streams, k)
	}
	h.mu.Unlock()
	if last {
		h.rdb.Del(context.Background(), h.presenceKey(project, name))
	}
}

// present sets the relay's presence for presenceTTL.
func (h *Hub) present(ctx context.Context, project, name string) error {
	return h.rdb.Set(ctx, h.presenceKey(project, name), "1", h.presenceTTL()).Err()
}

// wake calls Config.Wake.
func (h *Hub) wake(ctx context.Context, project, name string) {
	if h.cfg.Wake != nil {
		h.cfg.Wake(ctx, project, name)
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
