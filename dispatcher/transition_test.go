package dispatcher

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
)

func TestTransition(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	due := now.Add(15 * time.Minute) // the delivery's own next automatic attempt
	ok := Outcome{Status: webhookd.DeliverySucceeded}
	retry := Outcome{Status: webhookd.DeliveryRetrying, NextAttemptAt: later}
	dead := Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonClientError}
	gone := Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonClientError, DisableEndpoint: true}
	cases := []struct {
		name     string
		prev     string
		manual   bool
		out      Outcome
		status   string
		next     *time.Time
		reason   string
		replayed string
		disable  bool
	}{
		{"auto success", "pending", false, ok, "succeeded", nil, "", "", false},
		{"auto retry", "retrying", false, retry, "retrying", &later, "", "", false},
		{"auto dead", "pending", false, dead, "dead_letter", nil, "client_error", "", false},
		{"auto gone", "retrying", false, gone, "dead_letter", nil, "client_error", "", true},
		{"manual success on dead letter", "dead_letter", true, ok, "succeeded", nil, "", "ops", false},
		{"manual failure on dead letter", "dead_letter", true, retry, "dead_letter", nil, "", "", false},
		{"manual failure on succeeded", "succeeded", true, dead, "succeeded", nil, "", "", false},
		{"manual failure while pending keeps the schedule", "pending", true, dead, "retrying", &due, "", "", false},
		{"manual failure while retrying keeps the schedule", "retrying", true, retry, "retrying", &due, "", "", false},
		{"manual success while retrying", "retrying", true, ok, "succeeded", nil, "", "", false},
		{"manual 410 disables", "dead_letter", true, gone, "dead_letter", nil, "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := transition(c.prev, &due, Request{Manual: c.manual, By: "ops"}, c.out, now)
			if got.Status != c.status || got.DeadLetterReason != c.reason || got.ReplayedBy != c.replayed ||
				got.DisableEndpoint != c.disable || (got.NextAttemptAt == nil) != (c.next == nil) ||
				(c.next != nil && !got.NextAttemptAt.Equal(*c.next)) {
				t.Fatalf("got %+v", got)
			}
		})
	}
}
