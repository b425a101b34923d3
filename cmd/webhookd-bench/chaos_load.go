package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/webhookd/webhookd/client"
)

// chaosEventTypes are the event types the senders use, with their shares
// in per mille; chaosEndpoints says which endpoints take each. Only
// audit.logged reaches the hanging endpoint, and rarely: its adaptive limit
// falls to one request per worker, each held for the response timeout
// (3 s), so 2 workers take 2/3 of an attempt a second there; at 20 events
// a second, 2 per mille need 0.2 (5 attempts each), a share a drain can
// finish. At 1% a 30-minute soak left 111 of them waiting. account.updated
// goes to the ordered endpoint, one request at a time and held by each
// failure's retry: 4% (0.8 a second at 20 events a second) is a queue it
// keeps up with between faults.
var chaosEventTypes = []struct {
	name   string
	permil int
}{{"order.created", 658}, {"order.paid", 300}, {"account.updated", 40}, {"audit.logged", 2}}

// opsTypes are webhookd's operational event types (SPEC §3), which the
// ops endpoint subscribes to by name.
var opsTypes = []string{"webhookd.endpoint.circuit_opened", "webhookd.endpoint.circuit_closed",
	"webhookd.endpoint.disabled", "webhookd.delivery.dead_lettered"}

// chaosEndpoints are the soak's endpoints: name, behaviour, event types
// (none: every type of the senders'), ordering. flapping opens and closes
// its circuit; ops takes webhookd's operational events and none of the
// senders'.
var chaosEndpoints = []struct {
	name      string
	behaviour chaosBehaviour
	types     []string
	ordering  string
}{
	{"instant", chaosInstant, nil, ""},
	{"slow", chaosSlow, nil, ""},
	{"flapping", chaosFlapping, []string{"order.created", "order.paid"}, ""},
	{"ratelimited", chaosRateLimited, []string{"order.paid", "audit.logged"}, ""},
	{"hanging", chaosHanging, []string{"audit.logged"}, ""},
	{"gone", chaosGone, []string{"order.created"}, ""},
	{"ordered", chaosOrdered, []string{"account.updated"}, "fifo"},
	{"ops", chaosInstant, opsTypes, ""},
}

// routes names the endpoints an event of type t must reach.
func routes(t string) []string {
	var out []string
	for _, e := range chaosEndpoints {
		if e.types == nil || slices.Contains(e.types, t) {
			out = append(out, e.name)
		}
	}
	return out
}

// apiAnswer is one try the client made: what came back, or that nothing did.
type apiAnswer struct {
	at         time.Time
	serve      string
	status     int    // 0: no answer
	retryAfter bool   // the answer had Retry-After
	failure    string // no answer: why (a dial error, a timeout, ...)
	requestID  string // X-Request-Id, to find the request in the process's log
}

// answerLog is every try of every sender, in the order they ended.
type answerLog struct {
	mu      sync.Mutex
	answers []apiAnswer
}

func (l *answerLog) add(a apiAnswer) {
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
}

// All is a copy of the log.
func (l *answerLog) All() []apiAnswer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.answers)
}

// FirstAcceptAfter is the first 2xx at or after t.
func (l *answerLog) FirstAcceptAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.answers {
		if a.status/100 == 2 && !a.at.Before(t) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// recordingTransport notes every try's answer in the log.
type recordingTransport struct {
	base  http.RoundTripper
	serve string
	log   *answerLog
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	a := apiAnswer{at: time.Now(), serve: t.serve}
	if err != nil {
		a.failure = err.Error()
	} else {
		a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
		a.requestID = resp.Header.Get("X-Request-Id")
	}
	t.log.add(a)
	return resp, err
}

// sendOp is one logical send (one Idempotency-Key): a single event or a
// batch, and what the API said.
type sendOp struct {
	key    string
	events []client.NewEvent
	batch  bool

	mu       sync.Mutex
	sentAt   time.Time // the first try began
	okAt     time.Time // the first success came back
	ids      []string  // the event ids of the first success
	err      error     // the last failure while ids is nil
	repeats  int       // successful repeats with the same key
	mismatch []string  // a repeat answered with other ids than the first
}

// chaosLoad is the senders: the project's Go client, one per serve
// process, and the ledger of every send.
type chaosLoad struct {
	clients []*client.Client
	names   []string
	answers *answerLog
	seq     int64
	outbox  *outboxSender
	bulk    *bulkSender
	// bulkResolved counts the bulks that got their 202 only when Resolve
	// tried them again.
	bulkResolved int

	mu  sync.Mutex
	ops []*sendOp
}

func newChaosLoad(s *chaosSystem) (*chaosLoad, error) {
	l := &chaosLoad{answers: &answerLog{}}
	for _, p := range s.Serves() {
		hc := newLoopbackClient(0)
		hc.Transport = recordingTransport{base: hc.Transport, serve: p.Name, log: l.answers}
		c, err := client.New("http://"+p.APIAddr, s.key, client.WithHTTPClient(hc),
			client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 8, PerTryTimeout: 15 * time.Second}))
		if err != nil {
			return nil, err
		}
		l.clients = append(l.clients, c)
		l.names = append(l.names, p.Name)
	}
	l.outbox = &outboxSender{url: s.outboxDB.URL}
	l.bulk = &bulkSender{clients: l.clients}
	return l, nil
}

// acceptedAt is when the API first answered 2xx for each event, by event
// id.
func (l *chaosLoad) acceptedAt() map[string]time.Time {
	l.mu.Lock()
	ops := l.ops
	l.mu.Unlock()
	at := make(map[string]time.Time)
	for _, op := range ops {
		op.mu.Lock()
		for _, id := range op.ids {
			at[id] = op.okAt
		}
		op.mu.Unlock()
	}
	return at
}

// Run sends rate events a second from senders goroutines until ctx ends:
// single events, batches of 2 to 10, and repeats of earlier sends with
// their key and body; beside them, outbox transactions (rate/6 a second,
// 1 to 3 rows each) and a bulk job every 5 to 12 s. Each draws from a
// generator of its own, so adding one changes none of the others' choices.
func (l *chaosLoad) Run(ctx context.Context, seed uint64, rate, senders int) {
	var wg sync.WaitGroup
	// Streams far from the senders' (100 + i), whatever -senders is.
	wg.Go(func() { l.outbox.Run(ctx, rand.New(rand.NewPCG(seed, 1<<32)), max(float64(rate)/6, 0.5)) })
	wg.Go(func() { l.bulk.Run(ctx, rand.New(rand.NewPCG(seed, 1<<32+1))) })
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.sender(ctx, rand.New(rand.NewPCG(seed, uint64(100+i))), float64(rate)/float64(senders))
		}()
	}
	wg.Wait()
}

func (l *chaosLoad) sender(ctx context.Context, rng *rand.Rand, rate float64) {
	next := time.Now()
	for ctx.Err() == nil {
		var op *sendOp
		switch n := rng.IntN(100); {
		case n < 12:
			op = l.pick(rng)
		case n < 30:
			op = l.newOp(rng, 2+rng.IntN(9), true)
		}
		if op == nil {
			op = l.newOp(rng, 1, false)
		}
		l.send(ctx, op, rng.IntN(len(l.clients)))
		// Pace by events: a batch of 6 waits as long as 6 singles.
		next = next.Add(time.Duration(float64(len(op.events)) / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if d < -5*time.Second {
			next = time.Now() // a long outage: do not burst to catch up
		}
	}
}

// newOp makes a send of n events under a fresh key.
func (l *chaosLoad) newOp(rng *rand.Rand, n int, batch bool) *sendOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	op := &sendOp{key: fmt.Sprintf("chaos-%d-%d", len(l.ops), rng.Uint32()), batch: batch}
	for range n {
		l.seq++
		op.events = append(op.events, client.NewEvent{Type: pickType(rng), Data: map[string]int64{"n": l.seq}})
	}
	l.ops = append(l.ops, op)
	return op
}

// pick returns an earlier send to repeat, or nil.
func (l *chaosLoad) pick(rng *rand.Rand) *sendOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ops) == 0 {
		return nil
	}
	return l.ops[rng.IntN(len(l.ops))]
}

// pickRoomyType is pickType for the outbox and bulk senders: order.created
// or order.paid, in their shares. The hanging and ordered endpoints' shares
// are what they can take of the posted events alone (chaosEventTypes);
// these senders' events would crowd them past it, and the two types reach
// every other kind of endpoint, flapping and 410 among them.
func pickRoomyType(rng *rand.Rand) string {
	if rng.IntN(chaosEventTypes[0].permil+chaosEventTypes[1].permil) < chaosEventTypes[0].permil {
		return chaosEventTypes[0].name
	}
	return chaosEventTypes[1].name
}

func pickType(rng *rand.Rand) string {
	n := rng.IntN(1000)
	for _, t := range chaosEventTypes {
		if n < t.permil {
			return t.name
		}
		n -= t.permil
	}
	return chaosEventTypes[0].name
}

// send makes op's call through serve process i and records the outcome.
func (l *chaosLoad) send(ctx context.Context, op *sendOp, i int) {
	var ids []string
	var err error
	op.mu.Lock()
	if op.sentAt.IsZero() {
		op.sentAt = time.Now()
	}
	op.mu.Unlock()
	opt := client.WithIdempotencyKey(op.key)
	if op.batch {
		var evs []client.Event
		if evs, err = l.clients[i].SendEvents(ctx, op.events, opt); err == nil {
			for _, e := range evs {
				ids = append(ids, e.ID)
			}
		}
	} else {
		var ev *client.Event
		if ev, err = l.clients[i].SendEvent(ctx, op.events[0], opt); err == nil {
			ids = []string{ev.ID}
		}
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("cut short at the end of the load: %w", err)
	}
	op.record(ids, err)
}

func (op *sendOp) record(ids []string, err error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	switch {
	case err != nil:
		if op.ids == nil {
			op.err = err
		}
	case op.ids == nil:
		op.ids, op.err, op.okAt = ids, nil, time.Now()
	case slices.Equal(op.ids, ids):
		op.repeats++
	default:
		op.mismatch = append(op.mismatch, fmt.Sprint(ids))
	}
}

// Resolve repeats, with its key, every send and bulk that never succeeded,
// until it does or ctx ends: once the faults are over, each must come back
// with its one set of ids, or its one job. It returns the sends resolved
// (the bulks': bulkResolved).
func (l *chaosLoad) Resolve(ctx context.Context) (resolved int) {
	l.bulkResolved = l.bulk.Resolve(ctx)
	for _, op := range l.Ops() {
		op.mu.Lock()
		pending := op.ids == nil
		op.mu.Unlock()
		for tries := 0; pending && ctx.Err() == nil && tries < 10; tries++ {
			l.send(ctx, op, 0)
			op.mu.Lock()
			pending = op.ids == nil
			op.mu.Unlock()
			if !pending {
				resolved++
			}
		}
	}
	return resolved
}

// Ops is every send made.
func (l *chaosLoad) Ops() []*sendOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}
