package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/webhookd/webhookd/storage"
)

// historyOptions is the command line of `webhookd-bench history`, the
// history generator (issue 34): it fills a database with days of finished
// deliveries, written with COPY rather than through the API, so that a
// figure measured on a full database can be reproduced by anyone.
type historyOptions struct {
	DatabaseURL  string // -database-url; required: the database to fill (migrated first)
	Days         int    // -days; 14
	Deliveries   int    // -deliveries; 1000000, spread evenly over the days
	Projects     int    // -projects; 4
	Endpoints    int    // -endpoints; 100, over all projects (at least 4 a project)
	Streams      int    // -streams; 2 days written at once, each on a connection of its own
	PayloadBytes int    // -payload-bytes; 1024, the mean size of an event's data
	Seed         uint64 // -seed; 0: drawn from the clock (and printed)
}

func (o *historyOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.DatabaseURL, "database-url", "", "the PostgreSQL database to fill, on loopback (required; migrated first)")
	fs.IntVar(&o.Days, "days", 14, "days of history, ending at the last UTC midnight at least 26h ago")
	fs.IntVar(&o.Deliveries, "deliveries", 1000000, "deliveries in all, spread evenly over the days")
	fs.IntVar(&o.Projects, "projects", 4, "projects the events belong to")
	fs.IntVar(&o.Endpoints, "endpoints", 100, "endpoints over all projects (at least 4 a project)")
	fs.IntVar(&o.Streams, "streams", 2, "days written at once, each by a COPY stream of its own")
	fs.IntVar(&o.PayloadBytes, "payload-bytes", 1024, "mean size of an event's data in bytes")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the generated rows (0: drawn from the clock; printed either way)")
}

// Validate names the first bad option.
func (o *historyOptions) Validate() error {
	switch {
	case o.DatabaseURL == "":
		return errors.New("-database-url is required: the database to fill")
	case o.Days < 1 || o.Days > 3660:
		return errors.New("-days must be between 1 and 3660")
	case o.Deliveries < o.Days:
		return errors.New("-deliveries must be at least -days (one a day)")
	case o.Projects < 1:
		return errors.New("-projects must be at least 1")
	case o.Endpoints < 4*o.Projects:
		return errors.New("-endpoints must be at least 4 a project (an event goes to up to 4)")
	case o.Streams < 1 || o.Streams > 32:
		return errors.New("-streams must be between 1 and 32")
	case o.PayloadBytes < 64 || o.PayloadBytes > 65536:
		return errors.New("-payload-bytes must be between 64 and 65536")
	}
	return checkLoopbackURL(o.DatabaseURL)
}

// runHistory is `webhookd-bench history [flags]`. Exit status: 0 when the
// history was written, 1 when it could not be, 2 on bad flags, 130 when
// interrupted (the days written so far stay).
func runHistory(args []string) int {
	o := &historyOptions{}
	if !parseSeeded("history", o, &o.Seed, args) {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := generateHistory(ctx, o, time.Now())
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "webhookd-bench history: interrupted; the days written so far stay")
		return 130
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench history:", err)
		return 1
	}
	sum.Print(os.Stdout)
	return 0
}

// historyEnd is where generated history ends: the last UTC midnight at
// least 26 h before now. A dead letter's last attempt comes 25h16m after
// its delivery was made (the default retry schedule), so every attempt
// of the history is in the past, and nothing in it is still waiting.
func historyEnd(now time.Time) time.Time {
	return now.UTC().Add(-26 * time.Hour).Truncate(24 * time.Hour)
}

// generateHistory migrates the database, makes the projects and
// endpoints, and writes o.Days days of history ending at historyEnd(now),
// o.Streams days at a time.
func generateHistory(ctx context.Context, o *historyOptions, now time.Time) (*historySummary, error) {
	db, err := storage.Open(ctx, storage.Config{URL: o.DatabaseURL, MaxConns: int32(o.Streams + 1)})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		return nil, err
	}
	world, err := makeHistoryWorld(ctx, db.Pool(), o)
	if err != nil {
		return nil, err
	}
	end := historyEnd(now)
	start := end.AddDate(0, 0, -o.Days)
	// The new database's day partitions (migration 25) begin at the
	// history's first day, so that each day lands in its own, as it would
	// have had webhookd written it.
	if err := db.Store().StartDaysAt(ctx, start, now, 72*time.Hour); err != nil {
		return nil, err
	}
	progress("history: %d deliveries over %d days, %s to %s, %d projects, %d endpoints, %d streams",
		o.Deliveries, o.Days, start.Format(time.DateOnly), end.Format(time.DateOnly), o.Projects, o.Endpoints, o.Streams)

	var written atomic.Int64
	began := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := written.Load()
				progress("history: %d of %d deliveries (%.0f/s)", n, o.Deliveries, float64(n)/time.Since(began).Seconds())
			}
		}
	}()
	days := make(chan int, o.Days)
	for d := range o.Days {
		days <- d
	}
	close(days)
	g, gctx := errgroup.WithContext(ctx)
	for range o.Streams {
		g.Go(func() error {
			for d := range days {
				n := o.Deliveries / o.Days
				if d < o.Deliveries%o.Days {
					n++
				}
				day := historyDay{world: world, start: start.AddDate(0, 0, d), deliveries: n,
					seed: o.Seed ^ uint64(d+1)*0x9E3779B97F4A7C15, payloadBytes: o.PayloadBytes}
				if err := day.write(gctx, db.Pool(), &written); err != nil {
					return fmt.Errorf("day %s: %w", day.start.Format(time.DateOnly), err)
				}
			}
			return nil
		})
	}
	err = g.Wait()
	close(done)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(began)
	progress("history: %d deliveries in %s (%.0f/s); analyzing", written.Load(), elapsed.Round(time.Millisecond),
		float64(written.Load())/elapsed.Seconds())
	if _, err := db.Pool().Exec(ctx, `ANALYZE events, deliveries, attempts, dead_letters`); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	sum, err := summarizeHistory(ctx, db.Pool())
	if err != nil {
		return nil, err
	}
	sum.Elapsed, sum.Written = elapsed, written.Load()
	return sum, nil
}
