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
	db := poolOfOne(t, t.Context()) // setup is not what the deadline bounds
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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

// TestLeaderTakesBackATurnItCouldNotGiveUp: when the turn cannot be given
// up as fn returns (here the leaders table is away; in life PostgreSQL
// restarts mid-pass), the next call in the process takes it back at once
// instead of waiting for it to run out, and another process still waits.
func TestLeaderTakesBackATurnItCouldNotGiveUp(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ran, err := db.AsLeader(ctx, "task", func(ctx context.Context) error {
		_, err := db.Pool().Exec(ctx, `ALTER TABLE leaders RENAME TO leaders_away`)
		return err
	})
	if !ran || err == nil {
		t.Fatalf("AsLeader with the leaders table away as fn returned: ran %v, err %v; want ran and the give-up's error", ran, err)
	}
	exec(`ALTER TABLE leaders_away RENAME TO leaders`)
	var held bool
	if err := db.Pool().QueryRow(ctx, `SELECT until > now() FROM leaders WHERE name = 'task'`).Scan(&held); err != nil || !held {
		t.Fatalf("the turn that was not given up: held %v, %v; want still held", held, err)
	}

	// Another process finds it held; this one takes it back.
	other := sameSchema(t, ctx, db, 2)
	if ran, err := other.AsLeader(ctx, "task", func(context.Context) error { return nil }); err != nil || ran {
		t.Fatalf("another process: ran %v, %v; want the turn still held", ran, err)
	}
	calls := 0
	for range 2 { // the second call: the turn was given up this time, and a fresh one is taken
		ran, err = db.AsLeader(ctx, "task", func(context.Context) error { calls++; return nil })
		if err != nil || !ran {
			t.Fatalf("the process that could not give its turn up: ran %v, %v; want it taken back at once", ran, err)
		}
	}
	if ran, err := other.AsLeader(ctx, "task", func(context.Context) error { return nil }); err != nil || !ran {
		t.Fatalf("another process after the turn was given up: ran %v, %v", ran, err)
	}
}
