package dispatcher

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
)

// metrics are the worker's Prometheus series.
type metrics struct {
	attempts *prometheus.CounterVec
	duration prometheus.Histogram
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
	}
	for _, c := range []prometheus.Collector{m.attempts, m.duration} {
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
