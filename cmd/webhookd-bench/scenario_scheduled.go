package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/webhookd/webhookd/dispatcher"
)

// scheduledScenario: a large schedule of deliveries due in an hour. It
// measures what each costs in Redis and whether the reconciler's passes
// stay short with all of them in PostgreSQL.
var scheduledScenario = scenario{
	Name: "scheduled",
	Title: func(o *Options) string {
		return fmt.Sprintf("%s deliveries due in 1 h, written with SQL and enqueued with dispatcher.Queue; Redis "+
			"used_memory per scheduled delivery; then webhookd all with WEBHOOKD_RECONCILE_INTERVAL=1s and the "+
			"duration of its reconciler passes (%s on /metrics)", thousands(float64(o.ScheduledCount)), reconcilerMetric)
	},
	Run: runScheduled,
}

func runScheduled(ctx context.Context, o *Options, seq int) (result, error) {
	s, err := prepareStack(ctx, o, seq)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	var notes []string
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	url := s.recv.Add("scheduled", instant)
	start := time.Now()
	if err := seedScheduled(ctx, s.db.URL, url, o.ScheduledCount, due); err != nil {
		return result{}, err
	}
	progress("  seeded %s deliveries in PostgreSQL in %s", thousands(float64(o.ScheduledCount)),
		time.Since(start).Round(100*time.Millisecond))
	mem, enqueueRate, note, err := measureSchedule(ctx, s, o.ScheduledCount, due)
	if err != nil {
		return result{}, err
	}
	notes = append(notes, note...)
	if err := s.start(ctx, "WEBHOOKD_RECONCILE_INTERVAL=1s"); err != nil {
		return result{}, err
	}
	passes, found, err := watchReconciler(ctx, s.client, s.proc.DashboardURL+"/metrics", 3, 15*time.Second, time.Minute)
	if err != nil {
		return result{}, err
	}
	meanPass, maxPass := passes.Mean*1000, passes.Max*1000
	if !found || passes.Passes == 0 {
		meanPass, maxPass = nan, nan
		notes = append(notes, "webhookd exports no "+reconcilerMetric+" (or made no pass): reconciler figures are n/a.")
	} else if passes.Passes < 3 {
		notes = append(notes, fmt.Sprintf("only %d reconciler passes within a minute (WEBHOOKD_RECONCILE_INTERVAL "+
			"may not be known yet).", passes.Passes))
	}
	if err := s.proc.Exited(); err != nil {
		return result{}, err
	}
	rss, err := s.peakRSS() // CPU times would say nothing here: no load runs through webhookd
	if err != nil {
		return result{}, err
	}
	figs := []figure{
		{Name: "Redis bytes per scheduled delivery", Unit: bytesUnit, Value: mem, Target: below(1024, bytesUnit)},
		{Name: "reconciler pass (max)", Unit: milliseconds, Value: maxPass, Target: below(1000, milliseconds)},
		{Name: "reconciler pass (mean)", Unit: milliseconds, Value: meanPass, Target: info},
		{Name: "enqueued/s (8 clients, 1,000 per call)", Unit: perSecond, Value: enqueueRate, Target: info},
		{Name: "deliveries made early", Unit: count, Value: float64(s.recv.Distinct([]string{"scheduled"})), Target: none()},
		rss,
	}
	return result{Figures: figs, Notes: notes}, nil
}

// measureSchedule enqueues the n seeded deliveries and returns Redis's
// used_memory growth per delivery and the enqueue rate, with notes on what
// did not go as planned.
func measureSchedule(ctx context.Context, s *stack, n int, due time.Time) (float64, float64, []string, error) {
	var notes []string
	before, err := s.redis.UsedMemory(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	start := time.Now()
	if err := enqueueScheduled(ctx, dispatcher.NewQueue(s.redis.Client, "", taskTimeout), n, due); err != nil {
		return 0, 0, nil, err
	}
	rate := float64(n) / time.Since(start).Seconds()
	after, err := s.redis.UsedMemory(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	info, err := asynq.NewInspectorFromRedisClient(s.redis.Client).GetQueueInfo(dispatcher.DefaultQueue)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("inspect queue: %w", err)
	}
	if info.Scheduled != n {
		notes = append(notes, fmt.Sprintf("asynq holds %d scheduled tasks after enqueueing %d.", info.Scheduled, n))
	}
	return float64(after-before) / float64(n), rate, notes, nil
}
