package storage

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/warm"
)

// IngestRequest is one event request, as an Ingester takes it.
type IngestRequest struct {
	// Key is the request's Idempotency-Key in its project. With Key.Key
	// "" (a test event) nothing is claimed or remembered.
	Key    IdempotencyKey
	Events []NewEvent
	// Invalid, when set, is the client error the request's body gave: it
	// is remembered for the key, and nothing is written.
	Invalid error
	Now     time.Time
	// FieldPrefix names event i's place in error fields ("events[3]."
	// in a batch).
	FieldPrefix func(int) string
	// Render makes the response to remember: of the events written, or of
	// the client error (a *webhookd.Error) that leaves nothing written.
	// Nil without a key: the client error is Ingest's error then.
	Render func(evs []webhookd.Event, err error) (StoredResponse, error)
}

// IngestResult is what an event request got.
type IngestResult struct {
	Response StoredResponse
	Replayed bool             // Response is a stored one
	Events   []webhookd.Event // the events this request wrote, if it wrote any
}

// Ingester writes event requests, in groups that share one transaction:
// while the groups in flight run, new requests queue for the next one. A
// single request is a group of one, and every group takes the same steps
// (ingestGroup): claim the keys, match endpoints, write, remember. Each
// request keeps its own outcome: a client error is remembered for its key
// and writes nothing; a key that another transaction holds leaves the
// group and waits, holding no connection, for another try.
type Ingester struct {
	db        *DB
	parallel  int // groups in flight at once, at most
	maxEvents int // events in one group, unless one request alone has more

	mu      sync.Mutex
	pending []*ingestCall
	running int  // groups in flight
	opening bool // a group is preparing its round trip
	// holders are the requests that hold their key in this process: in a
	// group, or waiting to try again. Another request with the key waits
	// for the holder's outcome.
	holders map[ikey]*ingestCall
	groups  int64 // groups run (for tests)

	warm *warm.Pool // runs the groups, on stacks grown by the ones before

	beforeGroup func(n int) // tests: called as a group of n begins
	afterOpen   func()      // tests: called once a group has sent its round trip and the next may begin
}

// NewIngester returns an Ingester running at most parallel groups at once.
//
// Single-event requests run one group at a time: a group waiting to begin
// gathers every request that arrives meanwhile, and larger groups cost less
// per request. While many events wait (largeBacklog: batches), groups
// overlap in a pipeline: the next begins once the one before has made its
// round trip ready and sent, so one is prepared while the other is in
// PostgreSQL.
func (db *DB) NewIngester(parallel int) *Ingester {
	return &Ingester{db: db, parallel: max(parallel, 1), maxEvents: 2000, holders: map[ikey]*ingestCall{},
		warm: warm.New(time.Minute)}
}

type ikey struct{ project, key string }

// ingestCall is one request in an Ingester.
type ingestCall struct {
	req      IngestRequest
	k        ikey
	deadline time.Time         // when its wait ends (Ingest's wait)
	pause    time.Duration     // its last wait for a busy key
	alone    bool              // it runs in a group of its own: its group failed
	taken    map[string]string // external ids a group found taken → their events
	retry    retryKind         // set by its group: how it tries again
	res      IngestResult
	err      error
	done     chan struct{}
	// Guarded by Ingester.mu:
	running bool  // in a group now
	left    bool  // its caller left before it ended
	why     error // what its caller gets if it leaves at its deadline
}

// retryKind says why a request of a group must try again.
type retryKind int

const (
	retryNone retryKind = iota
	retryBusy           // its key is held by another transaction: wait a little
	retryNow            // its key's record committed as the claim ran: read it at once
)

// maxGroupTries bounds how often CreateEvents tries again a group that
// met endpoints changing under it.
const maxGroupTries = 10

// maxGroupRequests bounds the requests of one group.
const maxGroupRequests = 1000

// groupTimeout bounds one group's transaction.
const groupTimeout = 10 * time.Second

// groupLockTimeout is the longest a group waits for a row lock (another
// process's request with one of its external ids): then it fails, each of
// its requests runs in a group of its own, and one that fails so again
// tries later, holding nothing meanwhile, until its wait is over.
const groupLockTimeout = 100 * time.Millisecond

// Ingest writes req's events and their deliveries and remembers the
// response for its key, in a transaction shared with concurrent requests.
// A request whose key is busy (a repeat of a request still running, here
// or in another process) waits for it, holding no connection, at most wait
// in all: then it fails with idempotency_key_in_progress, or unavailable
// when what held it up was another request's external id. One whose
// caller leaves while it waits is dropped, while one already in a group
// commits, and a repeat replays it.
func (g *Ingester) Ingest(ctx context.Context, req IngestRequest, wait time.Duration) (IngestResult, error) {
	c := &ingestCall{req: req, k: ikey{req.Key.ProjectID, req.Key.Key}, deadline: time.Now().Add(wait),
		done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.startLocked()
	g.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	expired := false
	return g.await(ctx, c, deadline.C, &expired)
}

// IngestAll writes reqs as Ingest writes each, queued together in their
// order: they share groups, and a group takes them in that order (reqs
// with one key each; a repeat of a key waits for the one before). It is
// how a caller with many requests at once (the outbox relay) keeps their
// order, which requests made from separate goroutines would not. Each
// request gets its own result or error, at the same index; wait bounds
// them all.
func (g *Ingester) IngestAll(ctx context.Context, reqs []IngestRequest, wait time.Duration) ([]IngestResult, []error) {
	at := time.Now().Add(wait)
	calls := make([]*ingestCall, len(reqs))
	for i, req := range reqs {
		calls[i] = &ingestCall{req: req, k: ikey{req.Key.ProjectID, req.Key.Key}, deadline: at, done: make(chan struct{})}
	}
	g.mu.Lock()
	g.pending = append(g.pending, calls...)
	g.startLocked()
	g.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	expired := false
	res, errs := make([]IngestResult, len(reqs)), make([]error, len(reqs))
	for i, c := range calls {
		res[i], errs[i] = g.await(ctx, c, deadline.C, &expired)
	}
	return res, errs
}

// await waits for c's outcome until ctx ends or deadline fires (expired
// says it fired already, for a deadline shared by several calls).
func (g *Ingester) await(ctx context.Context, c *ingestCall, deadline <-chan time.Time, expired *bool) (IngestResult, error) {
	for {
		if *expired {
			deadline = nil
			if res, err, ok := g.expire(c); ok {
				return res, err
			}
		}
		select {
		case <-c.done:
			return c.res, c.err
		case <-ctx.Done():
			g.mu.Lock()
			g.leaveLocked(c)
			g.mu.Unlock()
			return IngestResult{}, ctx.Err()
		case <-deadline:
			*expired = true
		}
	}
}

// expire ends c's wait at its deadline, unless a group has it (a group is
// bounded, groupTimeout: its outcome comes) or it has ended; ok says it
// ended the wait.
func (g *Ingester) expire(c *ingestCall) (IngestResult, error, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if isClosed(c.done) {
		return c.res, c.err, true
	}
	if c.running {
		return IngestResult{}, nil, false
	}
	g.leaveLocked(c)
	return IngestResult{}, cmp.Or(c.why, errKeyInProgress()), true
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leaveLocked drops c, which is not in a group now: from pending (lazily:
// takeLocked skips it), from its wait to try again, and as its key's
// holder. A call in a group goes on, and a repeat replays what it commits.
func (g *Ingester) leaveLocked(c *ingestCall) {
	c.left = true
	if g.holders[c.k] == c && !c.running {
		delete(g.holders, c.k)
		g.startLocked()
	}
}

// startLocked begins a group of what is pending: when none is in flight,
// or beside those in flight when many events wait (largeBacklog), none is
// preparing its round trip and fewer than parallel are in flight.
func (g *Ingester) startLocked() {
	if len(g.pending) == 0 || g.running > 0 && (g.opening || g.running >= g.parallel || g.backlogLocked() < largeBacklog) {
		return
	}
	group := g.takeLocked()
	if len(group) == 0 {
		return
	}
	for _, c := range group {
		c.running = true
		if c.k.key != "" {
			g.holders[c.k] = c
		}
	}
	g.running++
	g.opening = true
	g.groups++
	g.warm.Go(func() { g.run(group) })
}

// takeLocked takes the next group out of pending, in arrival order: at
// most one request per key, none whose key is in a group in flight (it
// waits for that group's outcome), and a request that must run alone only
// by itself.
func (g *Ingester) takeLocked() []*ingestCall {
	var (
		group  []*ingestCall
		events int
		full   bool
		keys   = map[ikey]bool{} // the keys of group
		keep   = g.pending[:0]
	)
	for _, c := range g.pending {
		switch n := max(len(c.req.Events), 1); {
		case c.left:
			if g.holders[c.k] == c {
				delete(g.holders, c.k)
			}
		case full || g.heldByAnother(c) || keys[c.k]:
			keep = append(keep, c)
		case c.alone || len(group) > 0 && (group[0].alone || events+n > g.maxEvents || len(group) >= maxGroupRequests):
			if len(group) == 0 {
				group, full = append(group, c), true
			} else {
				keep, full = append(keep, c), true
			}
		default:
			group, events = append(group, c), events+n
			if c.k.key != "" { // requests without a key never share one
				keys[c.k] = true
			}
		}
	}
	clear(g.pending[len(keep):])
	g.pending = keep
	return group
}

// heldByAnother reports whether another request holds c's key.
func (g *Ingester) heldByAnother(c *ingestCall) bool {
	h, ok := g.holders[c.k]
	return ok && h != c
}

// largeBacklog is how many waiting events begin a group beside those in
// flight.
const largeBacklog = 100

// backlogLocked counts the events waiting for a group.
func (g *Ingester) backlogLocked() int {
	n := 0
	for _, c := range g.pending {
		n += len(c.req.Events)
	}
	return n
}

// run commits group; once its round trip is sent, the next group
// may begin. Then each request is answered, or goes back to wait for a
// group again: all of a failed group, each alone; a busy key after a
// pause.
func (g *Ingester) run(group []*ingestCall) {
	if g.beforeGroup != nil {
		g.beforeGroup(len(group))
	}
	opened := sync.OnceFunc(func() {
		g.mu.Lock()
		g.opening = false
		g.startLocked()
		g.mu.Unlock()
		if g.afterOpen != nil {
			g.afterOpen()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	err := g.db.ingestGroup(ctx, g.db.pool, group, groupLockTimeout, opened)
	cancel()
	opened() // if the group failed before it sent its round trip

	var finished, again []*ingestCall
	g.mu.Lock()
	for _, c := range group {
		c.running = false
		switch {
		case err != nil && len(group) > 1:
			c.alone = true
			again = append(again, c)
		case err != nil && transient(err):
			g.retryLater(c, errContended(err), &finished)
		case err != nil:
			c.err = err
			finished = append(finished, c)
		case c.retry == retryNow:
			again = append(again, c)
		case c.retry == retryBusy:
			g.retryLater(c, errKeyInProgress(), &finished)
		default:
			finished = append(finished, c)
		}
		c.retry = retryNone
	}
	for _, c := range finished {
		if g.holders[c.k] == c {
			delete(g.holders, c.k)
		}
	}
	g.pending = append(again, g.pending...) // they came first
	g.running--
	g.startLocked()
	g.mu.Unlock()
	for _, c := range finished {
		close(c.done)
	}
}

// retryLater puts c back in pending after its next pause (nextPause),
// still holding its key; why is what its caller gets if its deadline comes
// first. Past its deadline already, c ends with why (added to finished).
func (g *Ingester) retryLater(c *ingestCall, why error, finished *[]*ingestCall) {
	if !time.Now().Before(c.deadline) {
		c.err = why
		*finished = append(*finished, c)
		return
	}
	c.pause, c.why = nextPause(c.pause), why
	time.AfterFunc(c.pause, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if c.left && g.holders[c.k] == c {
			delete(g.holders, c.k)
		} else if !c.left {
			g.pending = append(g.pending, c)
		}
		g.startLocked()
	})
}

// transient reports whether a group failed for a reason that trying again
// may not meet: a lock it waited for too long (another process's request
// with the same external id), a unique external id that request committed
// meanwhile, a deadlock or a serialization failure.
func transient(err error) bool {
	switch code, _ := pgCode(err); code {
	case "55P03", "23505", "40P01", "40001":
		return true
	}
	return false
}

// errContended is what a request gets when trying again past its deadline
// still met another transaction's lock.
func errContended(err error) error {
	return fmt.Errorf("%w (%v)", &webhookd.Error{Code: webhookd.CodeUnavailable,
		Message: "a concurrent request holds what this one writes; retry later"}, err)
}
