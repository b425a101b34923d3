package dispatcher

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// metrics are the worker's Prometheus series.
type metrics struct {
	attempts  *prometheus.CounterVec
	duration  prometheus.Histogram
	reconcile prometheus.Histogram
	offered   prometheus.Counter
	held      *prometheus.CounterVec
	groups    *prometheus.HistogramVec
	// reenqueued counts deliveries the reconciler gave a new task (their
	// own was lost, with Redis say); deadLetters, dead letters made by
	// reason; replays, dead-letter replays of background jobs by result.
	reenqueued  prometheus.Counter
	deadLetters *prometheus.CounterVec
	replays     *prometheus.CounterVec
	// probes counts probes of open circuits; circuits, circuits opened and
	// closed and endpoints disabled by the breaker.
	probes   prometheus.Counter
	circuits *prometheus.CounterVec
	// servers is how many asynq servers hand this worker its tasks (bells).
	servers prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	m := &metrics{
		attempts: counterVec("webhookd_delivery_attempts_total",
			"Delivery attempts by trigger, HTTP status class and resulting delivery status.", "trigger", "code", "outcome"),
		duration: histogram("webhookd_delivery_attempt_duration_seconds", "Time from sending a delivery to reading its response.",
			prometheus.DefBuckets),
		reconcile: histogram("webhookd_reconciler_pass_seconds", "Time one reconciler pass took (in the process that ran it).",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}),
		offered: counter("webhookd_reconciler_offered_total",
			"Due deliveries the reconciler offered to the queue (most were still queued; a rise after a Redis loss is the rebuild)."),
		held: counterVec("webhookd_deliveries_held_back_total",
			"Deliveries held back without an attempt, by waiting reason (endpoint_busy, rate_limit, circuit_open, fifo_turn).",
			"reason"),
		probes: counter("webhookd_circuit_probes_total", "Automatic attempts made as the probe of an endpoint's open circuit."),
		circuits: counterVec("webhookd_circuit_transitions_total",
			"Endpoint circuits opened and closed, and endpoints disabled for failing, by this worker.", "transition"),
		groups: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "webhookd_group_commit_size",
			Help:    "Claims, records or breaker outcomes (kind claim, record, circuit) written together in one commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"kind"}),
		reenqueued: counter("webhookd_reconciler_reenqueued_total",
			"Due deliveries the reconciler found without a task and enqueued again (a rise means tasks were lost from Redis)."),
		deadLetters: counterVec("webhookd_dead_letters_total", "Deliveries that became dead letters, by reason.", "reason"),
		replays: counterVec("webhookd_dead_letter_replays_total",
			"Dead letters replayed by background jobs, by result (succeeded, failed).", "result"),
		servers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "webhookd_worker_task_servers",
			Help: "asynq servers taking this worker's tasks: 1 at rest, more while tasks wait in the queue."}),
	}
	for _, reason := range webhookd.DeadLetterReasons {
		m.deadLetters.WithLabelValues(reason) // every series from the start, so rate() sees the first one
	}
	for _, t := range []string{"opened", "closed", "disabled"} {
		m.circuits.WithLabelValues(t)
	}
	for _, c := range []prometheus.Collector{m.attempts, m.duration, m.reconcile, m.offered, m.held, m.groups,
		m.reenqueued, m.deadLetters, m.replays, m.probes, m.circuits, m.servers} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(a webhookd.Attempt, outcome string) {
	code := "error"
	if a.StatusCode != nil {
		code = strconv.Itoa(*a.StatusCode/100) + "xx"
	}
	m.attempts.WithLabelValues(a.Trigger, code, outcome).Inc()
	m.duration.Observe(float64(a.DurationMS) / 1000)
}

func (m *metrics) observeReconcile(d time.Duration) { m.reconcile.Observe(d.Seconds()) }

// recorded counts what a recorded transition made: a new dead letter.
func (m *metrics) recorded(r storage.Record) {
	if r.Transition.Status == webhookd.DeliveryDeadLetter && r.Lease.Delivery.Status != webhookd.DeliveryDeadLetter {
		m.deadLetters.WithLabelValues(r.Transition.DeadLetterReason).Inc()
	}
}

// replayed counts one replay of a background job (none when it failed
// before its request: err).
func (m *metrics) replayed(ok bool, err error) {
	if err == nil {
		m.replays.WithLabelValues(replayResults[ok]).Inc()
	}
}

var replayResults = map[bool]string{true: "succeeded", false: "failed"}

// backlogCollector reports, at each scrape, how long the longest-waiting
// due delivery of each waiting status has waited and the background jobs
// still to run, read from PostgreSQL through indexes within a short
// timeout (nothing when it cannot be read).
type backlogCollector struct {
	db                   *storage.DB
	clock                webhookd.Clock
	oldest, jobs, remain *prometheus.Desc
	circuits, openFor    *prometheus.Desc
}

func newBacklogCollector(db *storage.DB, clock webhookd.Clock) *backlogCollector {
	return &backlogCollector{db: db, clock: clock,
		oldest: prometheus.NewDesc("webhookd_deliveries_oldest_due_seconds",
			"How long the longest-waiting due delivery of each status (pending, retrying) not held by an attempt has been due; 0 when none is.",
			[]string{"status"}, nil),
		jobs: prometheus.NewDesc("webhookd_jobs", "Background jobs (dead-letter replays and bulk event jobs) by status: queued or running.",
			[]string{"status"}, nil),
		remain: prometheus.NewDesc("webhookd_job_items_remaining",
			"Items the queued and running background jobs have still to do: dead letters to replay, and bulk lines neither accepted nor refused.", nil, nil),
		circuits: prometheus.NewDesc("webhookd_circuits_open",
			"Endpoints whose circuit is open (or probing): their due deliveries wait for probes.", nil, nil),
		openFor: prometheus.NewDesc("webhookd_circuit_open_longest_seconds",
			"How long the longest-open endpoint circuit has been open; 0 when none is.", nil, nil)}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.oldest, c.jobs, c.remain, c.circuits, c.openFor} {
		ch <- d
	}
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := c.clock.Now()
	b, err := c.db.Store().ReadBacklog(ctx, now)
	if err != nil {
		return
	}
	for _, status := range []string{webhookd.DeliveryPending, webhookd.DeliveryRetrying} {
		age := 0.0
		if at, ok := b.OldestDue[status]; ok {
			age = max(now.Sub(at).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, status)
	}
	for _, status := range []string{"queued", "running"} {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(b.Jobs[status]), status)
	}
	ch <- prometheus.MustNewConstMetric(c.remain, prometheus.GaugeValue, float64(b.JobsRemaining))
	ch <- prometheus.MustNewConstMetric(c.circuits, prometheus.GaugeValue, float64(b.CircuitsOpen))
	openFor := 0.0
	if b.OldestOpen != nil {
		openFor = max(now.Sub(*b.OldestOpen).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.openFor, prometheus.GaugeValue, openFor)
}

// queueCollector reports the size of q's asynq queue by task state at
// each scrape (nothing when Redis cannot be reached).
type queueCollector struct {
	q    *Queue
	desc *prometheus.Desc
}

func newQueueCollector(q *Queue) *queueCollector {
	return &queueCollector{q: q,
		desc: prometheus.NewDesc("webhookd_queue_tasks", "Tasks in the asynq queue by state.", []string{"state"}, nil)}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	info, err := c.q.inspector.GetQueueInfo(c.q.queue)
	if err != nil {
		return
	}
	for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
		"retry": info.Retry, "archived": info.Archived} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// limitCollector exposes the distribution of the gate's adaptive limits
// and requests in flight over the endpoints it keeps, as histograms
// computed at scrape time: no series per endpoint, however many there are.
type limitCollector struct {
	gate             *gate
	limits, inFlight *prometheus.Desc
}

// limitBuckets are the upper bounds of the limit and in-flight histograms.
var limitBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

func newLimitCollector(g *gate) *limitCollector {
	return &limitCollector{gate: g,
		limits: prometheus.NewDesc("webhookd_endpoint_concurrency_limit",
			"The adaptive concurrency limits of the endpoints this worker delivered to lately, one observation per endpoint.", nil, nil),
		inFlight: prometheus.NewDesc("webhookd_endpoint_requests_in_flight",
			"Requests in flight per endpoint in this worker, one observation per endpoint it delivered to lately.", nil, nil)}
}

func (c *limitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.limits; ch <- c.inFlight }

func (c *limitCollector) Collect(ch chan<- prometheus.Metric) {
	loads := c.gate.loads()
	hist := func(desc *prometheus.Desc, value func(storage.EndpointLoad) int) prometheus.Metric {
		buckets := make(map[float64]uint64, len(limitBuckets))
		var sum float64
		for _, l := range loads {
			v := float64(value(l))
			sum += v
			for _, b := range limitBuckets {
				if v <= b {
					buckets[b]++
				}
			}
		}
		return prometheus.MustNewConstHistogram(desc, uint64(len(loads)), sum, buckets)
	}
	ch <- hist(c.limits, func(l storage.EndpointLoad) int { return l.Limit })
	ch <- hist(c.inFlight, func(l storage.EndpointLoad) int { return l.InFlight })
}
