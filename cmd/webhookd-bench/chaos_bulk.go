package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/client"
)

// bulkOp is one bulk request (one Idempotency-Key): its lines, each with a
// marker of its own in its data ({"bulk": marker}) and, every other line,
// as its external_id too, and the job the API answered with. The lines
// without an external_id have nothing but the job's cursor between them
// and a second event; those with one check that a line taken twice is
// refused, never made twice.
type bulkOp struct {
	key     string
	lines   []client.NewEvent
	markers []string // line i's

	mu       sync.Mutex
	tries    int
	jobID    string   // the first 202's
	err      error    // the last failure while jobID is ""
	repeats  int      // later 202s with the same job id
	mismatch []string // later 202s with another job id
}

// bulkSender posts small NDJSON bodies to POST /v1/events/bulk through the
// Go client's Bulk, now and then, over both serve processes.
type bulkSender struct {
	clients []*client.Client

	mu  sync.Mutex
	ops []*bulkOp
}

// Run posts a bulk of 20 to 200 lines every 5 to 12 s until ctx ends, and
// now and then repeats an earlier one with its key (the same job must come
// back). A bulk that gets no 202 is tried again with its key up to 4 times
// at once, and later by Resolve.
func (b *bulkSender) Run(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5*time.Second + time.Duration(rng.Int64N(int64(7*time.Second)))):
		}
		op := b.pickAccepted(rng)
		if op == nil {
			op = b.newOp(rng, 20+rng.IntN(181))
		}
		first := rng.IntN(len(b.clients))
		for try := 0; try < 4 && ctx.Err() == nil; try++ {
			if b.send(ctx, op, (first+try)%len(b.clients)) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(1<<try) * time.Second):
			}
		}
	}
}

func (b *bulkSender) newOp(rng *rand.Rand, n int) *bulkOp {
	b.mu.Lock()
	defer b.mu.Unlock()
	op := &bulkOp{key: fmt.Sprintf("chaos-bulk-%d-%d", len(b.ops), rng.Uint32())}
	for i := range n {
		m := fmt.Sprintf("bk-%d-%d", len(b.ops), i+1)
		ev := client.NewEvent{Type: pickRoomyType(rng), Data: map[string]string{"bulk": m}}
		if i%2 == 1 {
			ev.ExternalID = m
		}
		op.lines, op.markers = append(op.lines, ev), append(op.markers, m)
	}
	b.ops = append(b.ops, op)
	return op
}

// pickAccepted returns, one time in four, an earlier bulk that got its
// 202, to repeat; else nil.
func (b *bulkSender) pickAccepted(rng *rand.Rand) *bulkOp {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ops) == 0 || rng.IntN(4) != 0 {
		return nil
	}
	op := b.ops[rng.IntN(len(b.ops))]
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.jobID == "" {
		return nil
	}
	return op
}

// send makes one try through serve process i; it reports whether the
// API answered 202 or refused the body for good (no try will do better).
func (b *bulkSender) send(ctx context.Context, op *bulkOp, i int) bool {
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	id, err := b.clients[i].Bulk(tctx, slices.Values(op.lines), client.WithIdempotencyKey(op.key))
	op.mu.Lock()
	defer op.mu.Unlock()
	op.tries++
	switch {
	case err != nil:
		if op.jobID == "" {
			op.err = err
		}
		return permanent(err)
	case op.jobID == "":
		op.jobID, op.err = id, nil
	case op.jobID == id:
		op.repeats++
	default:
		op.mismatch = append(op.mismatch, id)
	}
	return true
}

// Resolve tries again, with its key, every bulk that never got a 202,
// until it does or ctx ends.
func (b *bulkSender) Resolve(ctx context.Context) (resolved int) {
	for _, op := range b.Ops() {
		for try := 0; try < 10 && ctx.Err() == nil; try++ {
			op.mu.Lock()
			pending := op.jobID == "" && (op.err == nil || !permanent(op.err))
			op.mu.Unlock()
			if !pending {
				break
			}
			if b.send(ctx, op, try%len(b.clients)) {
				op.mu.Lock()
				if op.jobID != "" {
					resolved++
				}
				op.mu.Unlock()
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return resolved
}

func permanent(err error) bool {
	var apiErr *client.Error
	return errors.As(err, &apiErr) && !apiErr.Temporary()
}

// Ops is every bulk made.
func (b *bulkSender) Ops() []*bulkOp {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ops)
}

// dbJob is a bulk job as PostgreSQL has it at the end.
type dbJob struct {
	status                     string
	total, done, failed, lines int
}

// readJobs reads every bulk job of webhookd's.
func (s *chaosSystem) readJobs(ctx context.Context) (map[string]dbJob, error) {
	conn, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT id, status, total, done, failed_count FROM jobs WHERE kind = 'event_bulk'`)
	if err != nil {
		return nil, err
	}
	jobs := make(map[string]dbJob)
	var id string
	var j dbJob
	_, err = pgx.ForEachRow(rows, []any{&id, &j.status, &j.total, &j.done, &j.failed}, func() error { jobs[id] = j; return nil })
	return jobs, err
}

// bulkLedger is the verdict on the bulk jobs.
type bulkLedger struct {
	Requests, Tries, Repeats, KeysMismatched int
	Accepted, NotAccepted                    int // requests with a 202 (a job id); without one, even after the faults
	Lines, LinesOfAccepted                   int // lines sent; lines of the accepted requests
	JobsSucceeded, JobsNotFinished           int // of the accepted requests' jobs
	JobsOtherwise, JobsUnknown               int // failed, canceled or missing; jobs no request got back
	LinesAccepted, LinesRefused              int // events made from the lines; refused lines (failed_count)
	LinesLost, LinesDoubled                  int // lines of a 202 with no event; lines with more than one
	LinesUnaccepted                          int // lines of a request without a 202 that became events anyway
	Deliveries, Delivered, DeadLetters       int // of the lines' events
	NotRouted                                int // to the 410 endpoint once it was disabled
	DeliveriesLost                           int
}

// checkBulk holds every bulk request against webhookd's jobs and events
// (by each line's marker): a 202's job succeeded with every line one
// event, no line of a request without a 202 any.
func checkBulk(ops []*bulkOp, jobs map[string]dbJob, byMarker map[string][]string, example func(string, ...any)) bulkLedger {
	var l bulkLedger
	known := make(map[string]bool)
	for _, op := range ops {
		op.mu.Lock()
		l.Requests++
		l.Tries += op.tries
		l.Lines += len(op.lines)
		if op.repeats > 0 {
			l.Repeats++
		}
		if len(op.mismatch) > 0 {
			l.KeysMismatched++
			example("bulk key %s answered job %s first, then %v", op.key, op.jobID, op.mismatch)
		}
		accepted := op.jobID != ""
		if accepted {
			known[op.jobID] = true
			l.Accepted++
			l.LinesOfAccepted += len(op.lines)
			j, ok := jobs[op.jobID]
			switch {
			case !ok:
				l.JobsOtherwise++
				example("bulk job %s (key %s) answered 202 but is not in PostgreSQL", op.jobID, op.key)
			case j.status == "succeeded":
				l.JobsSucceeded++
			case j.status == "queued" || j.status == "running":
				l.JobsNotFinished++
				example("bulk job %s still %s after the drain (%d of %d lines done)", op.jobID, j.status, j.done, j.total)
			default:
				l.JobsOtherwise++
				example("bulk job %s ended %s", op.jobID, j.status)
			}
			if ok {
				l.LinesRefused += j.failed
				if j.failed > 0 || j.total != len(op.lines) {
					example("bulk job %s: %d lines sent, total %d, done %d, refused %d", op.jobID, len(op.lines), j.total, j.done, j.failed)
				}
			}
		} else {
			l.NotAccepted++
			example("bulk key %s never got a 202 (%d tries): %v", op.key, op.tries, op.err)
		}
		for _, m := range op.markers {
			evs := byMarker[m]
			switch {
			case len(evs) > 1:
				l.LinesDoubled++
				example("bulk line %s became %d events: %v", m, len(evs), evs)
			case accepted && len(evs) == 0:
				l.LinesLost++
				example("bulk line %s of job %s became no event", m, op.jobID)
			}
			if len(evs) > 0 {
				if accepted {
					l.LinesAccepted++
				} else {
					l.LinesUnaccepted++
					example("bulk line %s of key %s, never answered 202, became %v", m, op.key, evs)
				}
			}
		}
		op.mu.Unlock()
	}
	for id := range jobs {
		if !known[id] {
			l.JobsUnknown++
			example("bulk job %s is in PostgreSQL but no request got its id (a key that made two jobs)", id)
		}
	}
	return l
}

func (l bulkLedger) failures(fail func(bool, string, ...any)) {
	fail(l.NotAccepted > 0, "%d bulk requests never got a 202, even after the faults", l.NotAccepted)
	fail(l.KeysMismatched > 0, "%d bulk Idempotency-Keys answered with two job ids", l.KeysMismatched)
	fail(l.JobsNotFinished > 0, "%d bulk jobs still running after the drain", l.JobsNotFinished)
	fail(l.JobsOtherwise > 0, "%d bulk jobs that answered 202 did not succeed", l.JobsOtherwise)
	fail(l.JobsUnknown > 0, "%d bulk jobs that no request got back", l.JobsUnknown)
	fail(l.LinesRefused > 0, "%d bulk lines refused", l.LinesRefused)
	fail(l.LinesLost > 0, "%d lines of accepted bulk jobs became no event", l.LinesLost)
	fail(l.LinesDoubled > 0, "%d bulk lines became more than one event", l.LinesDoubled)
	fail(l.LinesUnaccepted > 0, "%d lines of bulk requests never answered 202 became events", l.LinesUnaccepted)
	fail(l.DeliveriesLost > 0, "%d deliveries of bulk events lost", l.DeliveriesLost)
	fail(l.Requests == 0, "the bulk sender made no request")
}
