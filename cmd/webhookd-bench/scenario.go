package main

import (
	"context"
)

// scenario is one measured situation. Run performs one repetition on a
// fresh stack and returns its figures, always in the same order.
type scenario struct {
	Name  string
	Title func(o *Options) string // what it does, with the sizes used
	Run   func(ctx context.Context, o *Options, seq int) (result, error)
}

// result is one repetition's figures, and notes worth a line in the
// report (a feature webhookd lacks, a figure it does not export).
type result struct {
	Figures []figure
	Notes   []string
}

// scenarios are all of them, by name.
var scenarios = map[string]scenario{
	"burst":             burstScenario,
	"slow":              slowScenario,
	"noisy":             noisyScenario,
	"steady":            steadyScenario,
	"scheduled":         scheduledScenario,
	"ingest":            ingestScenario,
	"ingest-batch":      ingestBatchScenario,
	"ingest-redis-down": ingestRedisDownScenario,
	"ingest-api":        ingestAPIScenario,
	"one-slow":          oneSlowScenario,
	"one-slow-single":   oneSlowSingleScenario,
	"capacity":          capacityScenario,
	"capacity-latency":  capacityLatencyScenario,
	"kill":              killScenario,
	"flush":             flushScenario,
	"many-endpoints":    manyEndpointsScenario,
	"fifo":              fifoScenario,
	"circuit-rest":      circuitRestScenario,
	"dashboard":         dashboardScenario,
}
