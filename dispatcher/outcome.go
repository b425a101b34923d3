package dispatcher

import (
	"net/http"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/wire"
)

// Response is what one attempt got back (wire.Response).
type Response = wire.Response

// Outcome is what happens to a delivery after an attempt.
type Outcome struct {
	Status          string    // webhookd.DeliverySucceeded, DeliveryRetrying or DeliveryDeadLetter
	NextAttemptAt   time.Time // set when Status is DeliveryRetrying
	Reason          string    // dead-letter reason when Status is DeliveryDeadLetter
	DisableEndpoint bool      // the receiver answered 410 Gone (disabled_reason: gone)
}

// Classify applies the outcome table of SPEC §3 to attempt number attempt
// (1-based) that ended at now:
//
//   - 2xx: succeeded.
//   - 5xx, no response, 1xx or any other odd status: retry on the schedule.
//   - 429 or 503 with a valid Retry-After: retry at now + Retry-After
//     (rounded up to whole seconds, capped at 24 h) instead of the
//     schedule's delay; otherwise as above.
//   - 3xx (redirects are not followed): dead letter, reason redirect.
//   - other 4xx: dead letter, reason client_error; 410 also disables the
//     endpoint.
//
// A retry called for after the schedule's last attempt
// (attempt >= schedule.MaxAttempts()) is a dead letter with reason
// exhausted.
func Classify(now time.Time, attempt int, schedule Schedule, r Response) Outcome {
	code := r.StatusCode
	switch {
	case r.Err != nil:
		return retry(now, attempt, schedule, nil)
	case code >= 200 && code <= 299:
		return Outcome{Status: webhookd.DeliverySucceeded}
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		if d, ok := wire.ParseRetryAfter(r.Header.Get("Retry-After"), now); ok {
			return retry(now, attempt, schedule, &d)
		}
		return retry(now, attempt, schedule, nil)
	case code >= 300 && code <= 399:
		return Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonRedirect}
	case code >= 400 && code <= 499:
		return Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonClientError, DisableEndpoint: code == http.StatusGone}
	default: // 5xx, 1xx and anything odd
		return retry(now, attempt, schedule, nil)
	}
}

// retry schedules the next attempt after delay, or after the schedule's
// delay when delay is nil, unless the attempts are used up (the schedule
// has no delay after attempt: attempt >= schedule.MaxAttempts()).
func retry(now time.Time, attempt int, schedule Schedule, delay *time.Duration) Outcome {
	d, ok := schedule.Delay(attempt)
	if !ok {
		return Outcome{Status: webhookd.DeliveryDeadLetter, Reason: webhookd.ReasonExhausted}
	}
	if delay != nil {
		d = *delay
	}
	return Outcome{Status: webhookd.DeliveryRetrying, NextAttemptAt: now.Add(d)}
}
