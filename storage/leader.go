package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// leaderTTL is how long a turn lasts unless its holder renews it (every
// third of it while fn runs), so that it runs out only when the holder is
// gone (dead, or cut off from PostgreSQL); the task then waits at most this
// long for another process. It is WorkerStale, the time after which a
// silent worker's leases are voided: a worker killed mid-pass (a kill -9
// just after its start, whose first pass runs at once) left no process to
// rebuild a lost schedule for 15 s, past the few seconds SPEC §1 allows.
const leaderTTL = WorkerStale

// errLostTurn ends fn's context when its turn could not be renewed:
// another process may be running the task now.
var errLostTurn = errors.New("leader: the turn could not be renewed")

// AsLeader runs fn unless another process (or another call here) runs the
// task called name in the same schema right now, and tells whether it
// ran. The turn is a lease in the leaders table, timed by PostgreSQL's
// clock, renewed while fn runs and given up when it returns. It holds no
// connection meanwhile: fn may use the whole pool (a turn held as a
// transaction's advisory lock kept one connection, and with the pool
// exhausted fn waited for a connection only its own return freed). If a
// renewal fails, fn's context ends with errLostTurn as its cause.
//
// A turn that could not be given up (PostgreSQL unreachable as fn
// returned, or as the turn was taken) is not left to run out: the next
// call here takes it back at once. Else the task would run nowhere for up
// to leaderTTL after PostgreSQL came back — just when the reconciler has a
// schedule to rebuild (a chaos soak saw Redis lose its data, PostgreSQL
// restart mid-pass, and due deliveries wait 7 s for the turn).
func (db *DB) AsLeader(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	holder, stranded := db.turns.take(name)
	if !stranded {
		holder = newID("ldr_") // per call: two calls in one process take turns too
	}
	got, err := db.takeTurn(ctx, name, holder)
	if err != nil {
		// Taken or not (the reply may be what was lost), it is ours to
		// take back once PostgreSQL answers.
		db.turns.put(name, holder)
	}
	if err != nil || !got {
		return false, err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := db.keepTurn(fnCtx, cancel, name, holder)
	err = fn(fnCtx)
	stop() // before the turn is given up: a renewal after would take it again
	if upErr := db.giveTurnUp(ctx, name, holder); upErr != nil {
		db.turns.put(name, holder)
		err = errors.Join(err, upErr)
	}
	return true, err
}

// strandedTurns are the holders of turns, by task name, that a call of
// AsLeader here ended without giving up. Taking one removes it, so two
// calls never hold the same turn.
type strandedTurns struct {
	mu      sync.Mutex
	holders map[string]string
}

func (s *strandedTurns) take(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.holders[name]
	delete(s.holders, name)
	return h, ok
}

func (s *strandedTurns) put(name, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders == nil {
		s.holders = make(map[string]string)
	}
	s.holders[name] = holder
}

// takeTurn takes or renews holder's turn of name for leaderTTL, and
// tells whether holder has it: a turn is free once it has run out.
func (db *DB) takeTurn(ctx context.Context, name, holder string) (bool, error) {
	var got bool
	err := db.pool.QueryRow(ctx, `INSERT INTO leaders (name, holder, until) VALUES ($1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until
		WHERE leaders.until <= now() OR leaders.holder = EXCLUDED.holder
		RETURNING true`, name, holder, leaderTTL.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("leader %s: %w", name, err)
	}
	return got, nil
}

// keepTurn renews holder's turn of name every third of leaderTTL until
// the returned stop is called, which waits for a renewal under way. A
// renewal that fails cancels ctx with errLostTurn.
func (db *DB) keepTurn(ctx context.Context, cancel context.CancelCauseFunc, name, holder string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(leaderTTL / 3)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if got, err := db.takeTurn(ctx, name, holder); err != nil || !got {
				cancel(errors.Join(errLostTurn, err))
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// giveTurnUp ends holder's turn of name at once, also when ctx has ended:
// else the task waits for leaderTTL.
func (db *DB) giveTurnUp(ctx context.Context, name, holder string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := db.pool.Exec(ctx, `UPDATE leaders SET until = now() WHERE name = $1 AND holder = $2`, name, holder)
	if err != nil {
		return fmt.Errorf("leader %s: give the turn up: %w", name, err)
	}
	return nil
}
