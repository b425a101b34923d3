// Package webhookd holds the domain of the webhook delivery service: events,
// endpoints, deliveries, attempts and dead letters, their states, the
// application error type, and the few interfaces the parts meet at.
//
// It imports only the standard library; storage/, api/, dispatcher/ and the
// rest depend on it, and cmd/webhookd wires them together.
package webhookd

import (
	"context"
	"encoding/json"
	"time"
)

// Version is sent as webhookd/<Version> in the User-Agent of every delivery.
var Version = "0.1.0"

// Delivery states (SPEC §2 "Resource shapes").
const (
	DeliveryPending    = "pending"     // waiting for its first attempt
	DeliveryRetrying   = "retrying"    // failed at least once, another attempt scheduled
	DeliverySucceeded  = "succeeded"   // a 2xx arrived; no more attempts
	DeliveryDeadLetter = "dead_letter" // parked in the dead-letter table
	// DeliveryCanceled: its endpoint's transformation returned cancel: true;
	// no attempt was made, and none will be (done, like succeeded).
	DeliveryCanceled = "canceled"
)

// DeliveryStatuses are every delivery status, in the order documents list them.
var DeliveryStatuses = []string{DeliveryPending, DeliveryRetrying, DeliverySucceeded, DeliveryDeadLetter, DeliveryCanceled}

// Waiting reasons: why a delivery that is not done waits until its
// NextAttemptAt (Delivery.WaitingReason, SPEC §1 "One schedule").
const (
	WaitingSchedule     = "schedule"      // a retry's wait, by the backoff schedule
	WaitingEndpointBusy = "endpoint_busy" // its endpoint is at its concurrency limit
	WaitingRateLimit    = "rate_limit"    // its endpoint's rate limit
	WaitingCircuitOpen  = "circuit_open"  // its endpoint's circuit is open: the next probe
	WaitingFIFOTurn     = "fifo_turn"     // its turn in its endpoint's ordered queue
)

// WaitingReasons are every waiting reason, in the order documents list them.
var WaitingReasons = []string{WaitingSchedule, WaitingEndpointBusy, WaitingRateLimit, WaitingCircuitOpen,
	WaitingFIFOTurn}

// Endpoint states and the reasons an endpoint is disabled.
const (
	EndpointActive   = "active"
	EndpointDisabled = "disabled"

	DisabledManual  = "manual"  // disabled by a person (PATCH or dashboard)
	DisabledGone    = "gone"    // the receiver answered 410 Gone
	DisabledFailing = "failing" // no success for WEBHOOKD_ENDPOINT_DISABLE_AFTER while its attempts failed
)

// Orderings of an endpoint (SPEC §3 "Endpoint lifecycle").
const (
	OrderingNone = "none" // deliveries go concurrently, under the adaptive limit
	// OrderingFIFO: one delivery at a time, in the order the events were
	// accepted; a failing one holds those behind it until it succeeds or
	// becomes a dead letter.
	OrderingFIFO = "fifo"
)

// Circuit states of an endpoint (SPEC §3 "Endpoint lifecycle").
const (
	CircuitClosed  = "closed"  // attempts go as scheduled
	CircuitOpen    = "open"    // due deliveries wait, without attempts, for the next probe
	CircuitProbing = "probing" // one delivery is being tried as a probe
)

// Operational event types: webhookd's own events about a project's
// endpoints and deliveries. Clients cannot post types with this prefix.
const (
	ReservedTypePrefix      = "webhookd."
	EventCircuitOpened      = "webhookd.endpoint.circuit_opened"
	EventCircuitClosed      = "webhookd.endpoint.circuit_closed"
	EventEndpointDisabled   = "webhookd.endpoint.disabled"
	EventDeliveryDeadLetter = "webhookd.delivery.dead_lettered"
)

// Dead-letter reasons (SPEC §4).
const (
	ReasonExhausted        = "exhausted"
	ReasonClientError      = "client_error"
	ReasonRedirect         = "redirect"
	ReasonEndpointDisabled = "endpoint_disabled"
	// ReasonTransformationFailed: the endpoint's transformation threw or
	// ran past its budget; the attempt's error says how.
	ReasonTransformationFailed = "transformation_failed"
)

// DeadLetterReasons are every dead-letter reason, in the order documents list them.
var DeadLetterReasons = []string{ReasonExhausted, ReasonClientError, ReasonRedirect, ReasonEndpointDisabled,
	ReasonTransformationFailed}

// Attempt triggers (SPEC §3).
const (
	TriggerAuto      = "auto"
	TriggerManual    = "manual"
	TriggerTest      = "test"
	TriggerInspector = "inspector"
)

// Job kinds and states.
const (
	JobDeadLetterReplay = "dead_letter_replay"
	JobEventBulk        = "event_bulk"

	JobQueued    = "queued"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
	JobCanceled  = "canceled"
)

// TestEventType is the type of the event POST /v1/endpoints/{id}/test sends.
const TestEventType = "webhookd.test"

// DefaultMaxPayloadBytes is the payload limit's default
// (WEBHOOKD_MAX_PAYLOAD_BYTES): the most bytes an event's data, an API
// request's body and the body a transformation makes may hold.
const DefaultMaxPayloadBytes = 64 << 10

// Project is a tenant: every key, endpoint and event belongs to one.
type Project struct {
	ID                 string
	Name               string
	RateLimitPerMinute int           // API requests per minute, shared by all serve processes
	IdempotencyTTL     time.Duration // how long Idempotency-Key records are kept (≤ 72 h)
	CreatedAt          time.Time
}

// DefaultMaxInFlight is an endpoint's max_in_flight unless it sets a lower
// one: the ceiling of its adaptive concurrency limit in each worker.
const DefaultMaxInFlight = 1000

// Endpoint is a subscriber's URL with its filter, transformation and
// signing secrets.
type Endpoint struct {
	ID                 string
	ProjectID          string
	URL                string
	Description        string
	EventTypes         []string        // empty: every type
	Status             string          // EndpointActive or EndpointDisabled
	DisabledReason     *string         // nil while active
	RateLimitPerSecond *int            // nil: unlimited
	MaxInFlight        *int            // the ceiling of its adaptive limit per worker process; DefaultMaxInFlight unless set
	Ordering           string          // OrderingNone or OrderingFIFO
	Filter             json.RawMessage // a JSON object of conditions (package filter); nil: every event of its types
	Transformation     *string         // JavaScript defining function handler(webhook) (package transform); nil: none
	Circuit            string          // CircuitClosed, CircuitOpen or CircuitProbing
	ProbeAt            *time.Time      // while not closed: when the next probe may go
	Secret             string          // whsec_ + base64
	PreviousSecret     *string         // still signs until PreviousExpiresAt
	PreviousExpiresAt  *time.Time
	Version            int
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// Event is one accepted event with the deliveries it fanned out to.
type Event struct {
	ID         string
	ProjectID  string
	Type       string
	Data       json.RawMessage
	ExternalID *string
	CreatedAt  time.Time
	Deliveries []DeliveryRef
}

// Body is the JSON body of the event's deliveries as webhookd makes it,
// {"id","type","timestamp","data"}: what is signed and sent, unless its
// endpoint's transformation makes another of it.
func (e Event) Body() ([]byte, error) {
	return json.Marshal(struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{e.ID, e.Type, e.CreatedAt.UTC().Format(time.RFC3339Nano), e.Data})
}

// UserAgent is the User-Agent deliveries are sent with.
func UserAgent() string { return "webhookd/" + Version }

// DeliveryRef is the short form of a delivery listed with its event.
type DeliveryRef struct {
	ID         string
	EndpointID string
	Status     string
}

// Delivery is one event × endpoint pair and where it stands.
type Delivery struct {
	ID            string
	ProjectID     string
	EventID       string
	EndpointID    string
	EventType     string
	Status        string
	AttemptsCount int
	NextAttemptAt *time.Time
	// WaitingReason says why a delivery that is not done waits until
	// NextAttemptAt: schedule, endpoint_busy, rate_limit, circuit_open or
	// fifo_turn; "" while nothing holds it back.
	WaitingReason  string
	LastStatusCode *int
	LastError      *string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	Attempts       []Attempt // filled only where asked for, oldest first
}

// Attempt is one HTTP request made for a delivery, as logged.
type Attempt struct {
	DeliveryID      string
	Number          int
	RequestID       string
	URL             string
	Trigger         string
	StatusCode      *int
	Error           *string
	DurationMS      int64
	StartedAt       time.Time
	RequestHeaders  map[string]string
	ResponseHeaders map[string]string
	ResponseBody    string // the first 8 KiB, as text
	// TraceID is the trace the attempt was sent in (its span's, whose
	// traceparent the receiver got), as 32 hex digits; "" when tracing
	// was off.
	TraceID string
}

// DeadLetter records a delivery that will not be retried on its own.
type DeadLetter struct {
	ID             string
	ProjectID      string
	DeliveryID     string
	EventID        string
	EndpointID     string
	EventType      string
	Reason         string
	LastStatusCode *int
	DeadLetteredAt time.Time
	ReplayedAt     *time.Time
	ReplayedBy     *string
}

// Job is a background job with its progress.
type Job struct {
	ID          string
	ProjectID   string
	Kind        string
	Status      string
	Total       int
	Done        int
	FailedCount int
	CreatedAt   time.Time
	FinishedAt  *time.Time
}

// Finished reports whether the job is over: succeeded, failed or canceled.
func (j Job) Finished() bool {
	return j.Status == JobSucceeded || j.Status == JobFailed || j.Status == JobCanceled
}

// JobError is a line of a bulk job that was refused: its 1-based number
// and the error the single event route would have answered for it.
type JobError struct {
	Line    int
	Code    string
	Message string
	Field   string // "" when the error names none
}

// Enqueuer hands committed work to the queue. The queue is only a
// schedule: PostgreSQL stays the authority, and a reconciler re-enqueues
// whatever an Enqueuer failed to hand over.
type Enqueuer interface {
	// Enqueue schedules the deliveries for an attempt at their time. An id
	// already queued is not an error.
	Enqueue(ctx context.Context, deliveries ...ScheduledDelivery) error
	// EnqueueManual schedules the recorded redelivery requestID of a
	// delivery now, beside any automatic attempt; by names who asked.
	EnqueueManual(ctx context.Context, requestID, deliveryID, by string) error
	// EnqueueJob schedules a background job now. A job already queued is
	// not an error.
	EnqueueJob(ctx context.Context, jobID string) error
}

// ScheduledDelivery names a delivery and when it is due.
type ScheduledDelivery struct {
	ID         string
	EndpointID string // lets a worker hold the delivery back for its endpoint without a database read
	DueAt      time.Time
}

// Scheduled returns the deliveries of evs, due at at: what a writer of new
// events hands to the queue once they are committed.
func Scheduled(evs []Event, at time.Time) []ScheduledDelivery {
	var due []ScheduledDelivery
	for _, e := range evs {
		for _, d := range e.Deliveries {
			due = append(due, ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: at})
		}
	}
	return due
}

// Clock tells the time; tests inject their own.
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock of the running service.
type SystemClock struct{}

// Now returns the current time in UTC.
func (SystemClock) Now() time.Time { return time.Now().UTC() }
