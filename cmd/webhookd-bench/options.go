package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Options is the tool's command line. Each field's comment names its flag
// and default; the sizes default to the full benchmark, and make bench-smoke
// passes small ones.
type Options struct {
	Webhookd    string // -webhookd; bin/webhookd
	Baseline    string // -baseline; none: a binary measured alternately with -webhookd
	Build       bool   // -build; false: build -webhookd from ./cmd/webhookd first
	DatabaseURL string // -database-url; the local server's postgres database
	// HistoryDatabase is -history-database: a database on that server
	// (made by `webhookd-bench history`) that every -webhookd run uses, and
	// keeps, instead of a fresh one; BaselineHistoryDatabase is
	// -baseline-history-database, the same for -baseline's runs. None: a
	// fresh database per run.
	HistoryDatabase, BaselineHistoryDatabase string
	// Env is -env KEY=VALUE (repeatable): settings of every -webhookd
	// run's processes (WEBHOOKD_* only); BaselineEnv is -baseline-env, the
	// same for -baseline's runs. A setting compared with its default: the
	// same binary as both, -env on one side.
	Env, BaselineEnv envList
	Runs             int    // -runs; 3
	Out              string // -out; BENCHMARKS.md ("-" prints to stdout)
	Strict           bool   // -strict; false: exit 3 when a target is missed (or a figure is worse than -baseline's)
	Scenarios        string // -scenarios; all, comma-separated

	CeilingTasks int // -ceiling-tasks; 50000

	BurstEvents  int // -burst-events; 5000
	BurstBatch   int // -burst-batch; 100
	BurstClients int // -burst-clients; 4

	SlowDeliveries int // -slow-deliveries; 20000
	SlowEndpoints  int // -slow-endpoints; 100

	NoisyHangEvents int           // -noisy-hang-events; 1000
	NoisyRate       int           // -noisy-rate; 50 events/s
	NoisyDuration   time.Duration // -noisy-duration; 20s

	SteadyRate     int           // -steady-rate; 500 events/s
	SteadyWarmup   time.Duration // -steady-warmup; 3s
	SteadyDuration time.Duration // -steady-duration; 20s

	ScheduledCount     int // -scheduled-count; 1000000
	IngestEvents       int // -ingest-events; 20000
	IngestClients      int // -ingest-clients; 16
	IngestBatchEvents  int // -ingest-batch-events; 50000
	IngestBatchSize    int // -ingest-batch-size; 1000
	IngestBatchClients int // -ingest-batch-clients; 4
	RedisDownEvents    int // -redis-down-events; 5000

	OneSlowEvents  int           // -one-slow-events; 20000
	OneSlowSingles int           // -one-slow-singles; 2000 single POSTs (one-slow-single)
	FIFOEvents     int           // -fifo-events; 1000
	CapacityEvents int           // -capacity-events; 12000 (capacity and capacity-latency)
	KillInFlight   int           // -kill-in-flight; 450 requests at the receiver before the kill
	KillRate       int           // -kill-rate; 300 events/s
	FlushRate      int           // -flush-rate; 300 events/s
	FlushDuration  time.Duration // -flush-duration; 10s, the flush at half
	ManyEndpoints  int           // -many-endpoints; 100000
	RestEndpoints  int           // -rest-endpoints; 1000 open circuits (circuit-rest)
	RestDeliveries int           // -rest-deliveries; 100000 deliveries waiting for them
	RestDuration   time.Duration // -rest-duration; 30s of rest measured

	MaxInFlight       int  // -max-in-flight; 100 (burst and steady endpoints; 0: never sent)
	Transform         bool // -transform: every endpoint created with benchTransformation
	WorkerConcurrency int  // -worker-concurrency; 0: webhookd's default

	// TraceDir: -trace; "" writes nothing. Otherwise each ingest and one-slow-single run writes
	// one CSV there of every receipt: when its 202 came and its latency.
	TraceDir string

	StallTimeout time.Duration // -stall-timeout; 30s without a new receipt ends a wait
	MaxWait      time.Duration // -max-wait; 10m, the longest wait for deliveries
}

// defaultDatabaseURL is the server -database-url defaults to.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// scenarioNames lists every scenario in the order they run.
var scenarioNames = []string{"burst", "slow", "noisy", "steady", "scheduled", "ingest", "ingest-batch", "ingest-redis-down",
	"ingest-api", "one-slow", "one-slow-single", "capacity", "capacity-latency", "kill", "flush", "many-endpoints", "fifo", "circuit-rest", "dashboard"}

// bind registers every option on fs with its default.
func (o *Options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Webhookd, "webhookd", "bin/webhookd", "the webhookd binary to measure")
	fs.StringVar(&o.Baseline, "baseline", "",
		"a baseline webhookd binary: every scenario run is measured on it and on -webhookd alternately, "+
			"and the report gives both medians and their ratio (none: -webhookd alone)")
	fs.BoolVar(&o.Build, "build", false, "build -webhookd from ./cmd/webhookd before measuring")
	fs.StringVar(&o.DatabaseURL, "database-url", defaultDatabaseURL,
		"PostgreSQL server (on loopback) where each scenario run gets a fresh database")
	fs.StringVar(&o.HistoryDatabase, "history-database", "",
		"a database made by `webhookd-bench history` that every -webhookd run uses and keeps, instead of a fresh one "+
			"(issue 34's figures: the same binary over a history and over nothing)")
	fs.StringVar(&o.BaselineHistoryDatabase, "baseline-history-database", "", "the same as -history-database for -baseline's runs")
	fs.Var(&o.Env, "env", "WEBHOOKD_NAME=VALUE: a setting of every -webhookd run's processes (repeatable)")
	fs.Var(&o.BaselineEnv, "baseline-env", "WEBHOOKD_NAME=VALUE: a setting of every -baseline run's processes (repeatable)")
	fs.IntVar(&o.Runs, "runs", 3, "repetitions of every scenario; the report gives the median")
	fs.StringVar(&o.Out, "out", "BENCHMARKS.md", `report file ("-": stdout)`)
	fs.BoolVar(&o.Strict, "strict", false, "exit 3 when a target is missed, or a figure is more than 10% worse than -baseline's")
	fs.StringVar(&o.Scenarios, "scenarios", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated")
	fs.IntVar(&o.CeilingTasks, "ceiling-tasks", 50000, "tasks in the asynq no-op ceiling measurement")
	fs.IntVar(&o.BurstEvents, "burst-events", 5000, "burst: events (each to 4 endpoints)")
	fs.IntVar(&o.BurstBatch, "burst-batch", 100, "burst: events per batch request")
	fs.IntVar(&o.BurstClients, "burst-clients", 4, "burst: concurrent clients")
	fs.IntVar(&o.SlowDeliveries, "slow-deliveries", 20000, "slow: deliveries in all")
	fs.IntVar(&o.SlowEndpoints, "slow-endpoints", 100, "slow: endpoints, each answering after 200ms")
	fs.IntVar(&o.NoisyHangEvents, "noisy-hang-events", 1000, "noisy: events to the hanging endpoint")
	fs.IntVar(&o.NoisyRate, "noisy-rate", 50, "noisy: events per second to the healthy endpoint")
	fs.DurationVar(&o.NoisyDuration, "noisy-duration", 20*time.Second, "noisy: how long the healthy endpoint gets events")
	fs.IntVar(&o.SteadyRate, "steady-rate", 500, "steady: events per second")
	fs.DurationVar(&o.SteadyDuration, "steady-duration", 20*time.Second, "steady: how long events are sent")
	fs.DurationVar(&o.SteadyWarmup, "steady-warmup", 3*time.Second, "steady: how long the same load runs first, not measured")
	fs.IntVar(&o.ScheduledCount, "scheduled-count", 1000000, "scheduled: deliveries scheduled an hour ahead")
	fs.IntVar(&o.IngestEvents, "ingest-events", 20000, "ingest: events, one per POST")
	fs.IntVar(&o.IngestClients, "ingest-clients", 16, "ingest: concurrent clients")
	fs.IntVar(&o.IngestBatchEvents, "ingest-batch-events", 50000, "ingest-batch: events")
	fs.IntVar(&o.IngestBatchSize, "ingest-batch-size", 1000, "ingest-batch: events per batch request")
	fs.IntVar(&o.IngestBatchClients, "ingest-batch-clients", 4, "ingest-batch: concurrent clients")
	fs.IntVar(&o.RedisDownEvents, "redis-down-events", 5000, "ingest-redis-down: events posted while Redis is down")
	fs.IntVar(&o.OneSlowEvents, "one-slow-events", 20000, "one-slow: events to the one endpoint answering after 200ms")
	fs.BoolVar(&o.Transform, "transform", false, "create every endpoint with a transformation (a renamed-fields partner script; issue 36's cost)")
	fs.IntVar(&o.OneSlowSingles, "one-slow-singles", 2000, "one-slow-single: events, one per POST, to the one endpoint answering after 200ms")
	fs.IntVar(&o.FIFOEvents, "fifo-events", 1000, "fifo: events to the one ordered endpoint answering after 10ms")
	fs.IntVar(&o.CapacityEvents, "capacity-events", 12000, "capacity and capacity-latency: events to the endpoint of limited capacity")
	fs.IntVar(&o.KillInFlight, "kill-in-flight", 450,
		"kill: requests in flight at the receiver (over both workers) before one worker is killed")
	fs.IntVar(&o.KillRate, "kill-rate", 300, "kill: events per second posted until the kill")
	fs.IntVar(&o.FlushRate, "flush-rate", 300, "flush: events per second")
	fs.DurationVar(&o.FlushDuration, "flush-duration", 10*time.Second, "flush: how long events are posted; Redis is flushed at half")
	fs.IntVar(&o.ManyEndpoints, "many-endpoints", 100000, "many-endpoints: endpoints, one event each")
	fs.IntVar(&o.RestEndpoints, "rest-endpoints", 1000, "circuit-rest: endpoints with open circuits")
	fs.IntVar(&o.RestDeliveries, "rest-deliveries", 100000, "circuit-rest: deliveries waiting for those circuits")
	fs.DurationVar(&o.RestDuration, "rest-duration", 30*time.Second, "circuit-rest: how long webhookd's CPU is measured at rest")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 100,
		"max_in_flight sent for the burst and steady endpoints, so the per-endpoint cap is not what they measure (0: not sent)")
	fs.IntVar(&o.WorkerConcurrency, "worker-concurrency", 0, "WEBHOOKD_WORKER_CONCURRENCY for every run (0: webhookd's default)")
	fs.StringVar(&o.TraceDir, "trace", "", "a directory where each ingest and one-slow-single run writes a CSV of its receipts (ms from the first POST to the 202, ms from the 202 to the receipt, the POST's ms), named SCENARIO-RUN-FIRSTPOSTUNIXMS.csv")
	fs.DurationVar(&o.StallTimeout, "stall-timeout", 30*time.Second, "give up waiting for deliveries after this long without a new one")
	fs.DurationVar(&o.MaxWait, "max-wait", 10*time.Minute, "give up waiting for deliveries after this long in all")
}

// forBaseline is o with -baseline as the binary to measure.
func (o *Options) forBaseline() *Options {
	b := *o
	b.Webhookd = o.Baseline
	b.HistoryDatabase = o.BaselineHistoryDatabase
	b.Env = o.BaselineEnv
	return &b
}

// selected returns the scenarios to run, in their fixed order.
func (o *Options) selected() []string {
	want := strings.Split(o.Scenarios, ",")
	var out []string
	for _, name := range scenarioNames {
		if slices.Contains(want, name) {
			out = append(out, name)
		}
	}
	return out
}

// Validate names the first bad option.
func (o *Options) Validate() error {
	for _, s := range strings.Split(o.Scenarios, ",") {
		if !slices.Contains(scenarioNames, s) {
			return fmt.Errorf("-scenarios: unknown scenario %q (want some of %s)", s, strings.Join(scenarioNames, ","))
		}
	}
	positive := map[string]int{"-runs": o.Runs, "-ceiling-tasks": o.CeilingTasks, "-burst-events": o.BurstEvents,
		"-burst-batch": o.BurstBatch, "-burst-clients": o.BurstClients, "-slow-deliveries": o.SlowDeliveries,
		"-slow-endpoints": o.SlowEndpoints, "-noisy-hang-events": o.NoisyHangEvents, "-noisy-rate": o.NoisyRate,
		"-steady-rate": o.SteadyRate, "-scheduled-count": o.ScheduledCount,
		"-ingest-events": o.IngestEvents, "-ingest-clients": o.IngestClients, "-ingest-batch-events": o.IngestBatchEvents,
		"-ingest-batch-size": o.IngestBatchSize, "-ingest-batch-clients": o.IngestBatchClients,
		"-redis-down-events": o.RedisDownEvents, "-one-slow-events": o.OneSlowEvents, "-one-slow-singles": o.OneSlowSingles, "-fifo-events": o.FIFOEvents, "-capacity-events": o.CapacityEvents,
		"-kill-in-flight": o.KillInFlight, "-kill-rate": o.KillRate, "-flush-rate": o.FlushRate,
		"-many-endpoints": o.ManyEndpoints, "-rest-endpoints": o.RestEndpoints, "-rest-deliveries": o.RestDeliveries}
	for name, v := range positive {
		if v < 1 {
			return fmt.Errorf("%s must be at least 1", name)
		}
	}
	switch {
	case o.BurstBatch > 1000 || o.IngestBatchSize > 1000:
		return errors.New("-burst-batch and -ingest-batch-size must be at most 1000 (the API's batch limit)")
	case o.NoisyDuration <= 0 || o.SteadyDuration <= 0 || o.FlushDuration <= 0 || o.RestDuration <= 0:
		return errors.New("-noisy-duration, -steady-duration, -flush-duration and -rest-duration must be positive")
	case o.StallTimeout <= 0 || o.MaxWait <= 0:
		return errors.New("-stall-timeout and -max-wait must be positive")
	case o.MaxInFlight < 0 || o.WorkerConcurrency < 0:
		return errors.New("-max-in-flight and -worker-concurrency must not be negative")
	}
	return checkLoopbackURL(o.DatabaseURL)
}

// envList is a repeatable flag of WEBHOOKD_NAME=VALUE settings.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

// Set refuses anything but a WEBHOOKD_ setting: the run's own (database,
// Redis, addresses) are set by the tool and come after, so they win.
func (e *envList) Set(v string) error {
	name, _, ok := strings.Cut(v, "=")
	if !ok || !envName.MatchString(name) {
		return fmt.Errorf("%q: want WEBHOOKD_NAME=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

var envName = regexp.MustCompile(`^WEBHOOKD_[A-Z0-9_]+$`)

// checkLoopbackURL refuses a database URL whose host is not on loopback:
// the tool drives load, and it must only ever do so on this machine.
func checkLoopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("-database-url: %w", err)
	}
	if u.Hostname() == "localhost" {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-database-url: host %q is not a loopback address", u.Hostname())
	}
	return nil
}
