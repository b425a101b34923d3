package dispatcher

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
)

func TestClassify(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 300*int(time.Millisecond), time.UTC)
	sched := Schedule{time.Minute, 15 * time.Minute, time.Hour, 24 * time.Hour} // 5 attempts
	retryAfter := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	httpDate := func(d time.Duration) string { return now.Truncate(time.Second).Add(d).Format(http.TimeFormat) }

	succeeded := Outcome{Status: webhookd.DeliverySucceeded}
	retryIn := func(d time.Duration) Outcome {
		return Outcome{Status: webhookd.DeliveryRetrying, NextAttemptAt: now.Add(d)}
	}
	dead := func(reason string) Outcome { return Outcome{Status: webhookd.DeliveryDeadLetter, Reason: reason} }
	gone := dead(webhookd.ReasonClientError)
	gone.DisableEndpoint = true

	tests := []struct {
		name    string
		attempt int
		resp    Response
		want    Outcome
	}{
		{"200", 1, Response{StatusCode: 200}, succeeded},
		{"204", 3, Response{StatusCode: 204}, succeeded},
		{"299 on the last attempt", 5, Response{StatusCode: 299}, succeeded},

		{"500 after attempt 1", 1, Response{StatusCode: 500}, retryIn(time.Minute)},
		{"502 after attempt 2", 2, Response{StatusCode: 502}, retryIn(15 * time.Minute)},
		{"504 after attempt 4", 4, Response{StatusCode: 504}, retryIn(24 * time.Hour)},
		{"500 on the last attempt", 5, Response{StatusCode: 500}, dead(webhookd.ReasonExhausted)},
		{"500 past the last attempt (manual)", 7, Response{StatusCode: 500}, dead(webhookd.ReasonExhausted)},
		{"transport error", 1, Response{Err: errors.New("connection refused")}, retryIn(time.Minute)},
		{"transport error on the last attempt", 5, Response{Err: errors.New("connect timeout")}, dead(webhookd.ReasonExhausted)},
		{"transport error wins over a status", 3, Response{StatusCode: 200, Err: errors.New("response timeout")}, retryIn(time.Hour)},

		{"429 with Retry-After seconds", 1, Response{StatusCode: 429, Header: retryAfter("120")}, retryIn(120 * time.Second)},
		{"503 with Retry-After seconds", 2, Response{StatusCode: 503, Header: retryAfter("7")}, retryIn(7 * time.Second)},
		{"429 with Retry-After 0", 1, Response{StatusCode: 429, Header: retryAfter("0")}, retryIn(0)},
		{"429 with Retry-After date rounds up", 1, Response{StatusCode: 429, Header: retryAfter(httpDate(3 * time.Second))}, retryIn(3 * time.Second)},
		{"503 with Retry-After date in the past", 1, Response{StatusCode: 503, Header: retryAfter(httpDate(-time.Hour))}, retryIn(0)},
		{"429 with Retry-After capped at 24 h", 1, Response{StatusCode: 429, Header: retryAfter("604800")}, retryIn(24 * time.Hour)},
		{"503 with Retry-After date capped at 24 h", 1, Response{StatusCode: 503, Header: retryAfter(httpDate(72 * time.Hour))}, retryIn(24 * time.Hour)},
		{"429 without Retry-After", 2, Response{StatusCode: 429}, retryIn(15 * time.Minute)},
		{"429 with garbage Retry-After", 3, Response{StatusCode: 429, Header: retryAfter("later")}, retryIn(time.Hour)},
		{"503 without Retry-After", 1, Response{StatusCode: 503}, retryIn(time.Minute)},
		{"429 on the last attempt", 5, Response{StatusCode: 429, Header: retryAfter("1")}, dead(webhookd.ReasonExhausted)},
		{"503 with Retry-After on the last attempt", 5, Response{StatusCode: 503, Header: retryAfter("1")}, dead(webhookd.ReasonExhausted)},

		{"400", 1, Response{StatusCode: 400}, dead(webhookd.ReasonClientError)},
		{"401", 2, Response{StatusCode: 401}, dead(webhookd.ReasonClientError)},
		{"404", 1, Response{StatusCode: 404}, dead(webhookd.ReasonClientError)},
		{"413 on the last attempt", 5, Response{StatusCode: 413}, dead(webhookd.ReasonClientError)},
		{"410 disables the endpoint", 1, Response{StatusCode: 410}, gone},
		{"500 with Retry-After uses the schedule", 1, Response{StatusCode: 500, Header: retryAfter("5")}, retryIn(time.Minute)},

		{"301", 1, Response{StatusCode: 301}, dead(webhookd.ReasonRedirect)},
		{"302", 2, Response{StatusCode: 302}, dead(webhookd.ReasonRedirect)},
		{"304", 1, Response{StatusCode: 304}, dead(webhookd.ReasonRedirect)},
		{"308", 1, Response{StatusCode: 308}, dead(webhookd.ReasonRedirect)},

		{"100", 1, Response{StatusCode: 100}, retryIn(time.Minute)},
		{"600", 2, Response{StatusCode: 600}, retryIn(15 * time.Minute)},
		{"0 without an error", 1, Response{}, retryIn(time.Minute)},
		{"odd status on the last attempt", 5, Response{StatusCode: 199}, dead(webhookd.ReasonExhausted)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(now, tt.attempt, sched, tt.resp)
			if got != tt.want {
				t.Errorf("Classify(attempt %d, %+v) = %+v, want %+v", tt.attempt, tt.resp, got, tt.want)
			}
		})
	}
}

func TestClassifySingleAttemptSchedule(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	got := Classify(now, 1, Schedule{}, Response{StatusCode: 503})
	if want := (Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonExhausted}); got != want {
		t.Errorf("Classify = %+v, want %+v", got, want)
	}
}
