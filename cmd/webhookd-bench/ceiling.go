package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// Settings of the ceiling measurement, as in dispatcher's
// BenchmarkAsynqNoop, so the two can be compared.
const (
	ceilingConcurrency = 20
	ceilingPoll        = 100 * time.Millisecond // asynq TaskCheckInterval
	ceilingQueue       = "bench-noop"
)

// ceilingPayload is about the size of webhookd's delivery task payload.
var ceilingPayload = []byte(`{"delivery_id":"dlv_01JBENCHMARKPAYLOADPADDING0","trigger":"auto"}`)

// measureCeiling is asynq's own throughput on this machine: n tasks with
// TaskIDs enqueued one by one on a throwaway Redis, then processed by an
// in-process server with a handler that does nothing. It returns tasks/s
// from the first enqueue to the last task run, and the Redis version.
func measureCeiling(ctx context.Context, n int) (float64, string, error) {
	dir, err := os.MkdirTemp("", "webhookd-bench-ceiling-*")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(dir)
	rs, err := startRedis(ctx, dir)
	if err != nil {
		return 0, "", err
	}
	defer rs.Stop()
	version, err := rs.Info(ctx, "server", "redis_version")
	if err != nil {
		return 0, "", err
	}
	rate, err := runNoop(ctx, rs, n)
	return rate, version, err
}

// runNoop enqueues n tasks and times them until all have run.
func runNoop(ctx context.Context, rs *redisServer, n int) (float64, error) {
	var processed atomic.Int64
	all := make(chan struct{})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if processed.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	client := asynq.NewClientFromRedisClient(rs.Client)
	defer client.Close()
	srv := asynq.NewServerFromRedisClient(rs.Client, asynq.Config{Concurrency: ceilingConcurrency,
		Queues: map[string]int{ceilingQueue: 1}, TaskCheckInterval: ceilingPoll,
		Logger: quietLogger{}, LogLevel: asynq.ErrorLevel})
	start := time.Now()
	for i := range n {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("bench:noop", ceilingPayload),
			asynq.Queue(ceilingQueue), asynq.TaskID(fmt.Sprintf("noop-%d", i)))
		if err != nil {
			return 0, fmt.Errorf("ceiling: enqueue: %w", err)
		}
	}
	if err := srv.Start(handler); err != nil {
		return 0, fmt.Errorf("ceiling: start asynq server: %w", err)
	}
	defer srv.Shutdown()
	select {
	case <-all:
		return float64(n) / time.Since(start).Seconds(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(time.Minute + time.Duration(n)*10*time.Millisecond):
		return 0, fmt.Errorf("ceiling: %d of %d tasks ran", processed.Load(), n)
	}
}

// quietLogger keeps asynq's own log lines out of the tool's output.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}
