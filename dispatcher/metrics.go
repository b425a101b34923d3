package dispatcher

import (
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// metrics are the worker's Prometheus series.
type metrics struct {
	attempts  *prometheus.CounterVec
	duration  prometheus.Histogram
	reconcile prometheus.Histogram
	offered   prometheus.Counter
	held      *prometheus.CounterVec
	groups    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_delivery_attempts_total",
			Help: "Delivery attempts by trigger, HTTP status class and resulting delivery status.",
		}, []string{"trigger", "code", "outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhookd_delivery_attempt_duration_seconds",
			Help:    "Time from sending a delivery to reading its response.",
			Buckets: prometheus.DefBuckets,
		}),
		reconcile: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhookd_reconciler_pass_seconds",
			Help:    "Time one reconciler pass took (in the process that ran it).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		offered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhookd_reconciler_offered_total",
			Help: "Due deliveries the reconciler offered to the queue (most were still queued; a rise after a Redis loss is the rebuild).",
		}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_deliveries_held_back_total",
			Help: "Deliveries held back without an attempt, by reason: the endpoint at its in-flight cap, or over its rate limit.",
		}, []string{"reason"}),
		groups: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "webhookd_group_commit_size",
			Help:    "Claims or records written together in one statement and commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.duration, m.reconcile, m.offered, m.held, m.groups} {
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

// queueCollector reports the asynq queue's size by task state at each
// scrape (nothing when Redis cannot be reached).
type queueCollector struct {
	inspector *asynq.Inspector
	queue     string
	desc      *prometheus.Desc
}

func newQueueCollector(rdb redis.UniversalClient, queue string) *queueCollector {
	return &queueCollector{inspector: asynq.NewInspectorFromRedisClient(rdb), queue: queue,
		desc: prometheus.NewDesc("webhookd_queue_tasks", "Tasks in the asynq queue by state.", []string{"state"}, nil)}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	info, err := c.inspector.GetQueueInfo(c.queue)
	if err != nil {
		return
	}
	for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
		"retry": info.Retry, "archived": info.Archived} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}
