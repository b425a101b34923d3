package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestLeaderLeavesThePoolToFn: with a pool of one connection, the
// leader's pass reads through the pool (the reconciler's does): the turn
// holds no connection while fn runs.
func TestLeaderLeavesThePoolToFn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db := poolOfOne(t, ctx)
	ran, err := db.AsLeader(ctx, "reconciler", func(ctx context.Context) error {
		_, err := db.Store().DueDeliveries(ctx, time.Now(), time.Now(), storage.DueCursor{}, 10)
		return err
	})
	if err != nil || !ran {
		t.Fatalf("AsLeader with a pool of one: ran %v, %v", ran, err)
	}
}

// TestLeaderOneAtATime: while one call holds a task's turn, another (here
// or in another process) does not run it; the turn is free again as soon
// as fn returns, and once a holder that vanished has let it run out.
func TestLeaderOneAtATime(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holding, release, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := db.AsLeader(ctx, "task", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		finished <- err
	}()
	<-holding
	second := func() bool {
		t.Helper()
		ran, err := db.AsLeader(ctx, "task", func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return ran
	}
	if second() {
		t.Fatal("a second call ran while the first held the turn")
	}
	if ran, err := db.AsLeader(ctx, "other", func(context.Context) error { return nil }); err != nil || !ran {
		t.Fatalf("another task: ran %v, %v; turns are per task", ran, err)
	}
	close(release)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if !second() {
		t.Fatal("the turn was not free once the first call returned")
	}

	// Another process's turn: held until it runs out, on PostgreSQL's clock.
	if _, err := db.Pool().Exec(ctx, `UPDATE leaders SET holder = 'ldr_gone', until = now() + interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	if second() {
		t.Fatal("ran while another process's turn had a minute left")
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE leaders SET until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if !second() {
		t.Fatal("a turn that ran out was not taken")
	}
}
