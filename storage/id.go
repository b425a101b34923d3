package storage

import "github.com/oklog/ulid/v2"

// Id prefixes (SPEC §2 "Resource shapes").
const (
	prefixProject    = "prj_"
	prefixKey        = "key_"
	prefixEndpoint   = "ep_"
	prefixEvent      = "evt_"
	prefixDelivery   = "dlv_"
	prefixDeadLetter = "dl_"
	prefixJob        = "job_"
	prefixRequest    = "req_"
)

// newID returns prefix + a ULID, so ids sort by creation time.
func newID(prefix string) string { return prefix + ulid.Make().String() }

// NewRequestID returns a fresh request id (req_ + ULID).
func NewRequestID() string { return newID(prefixRequest) }

// NewWorkerID returns a fresh worker process id (wrk_ + ULID), which its
// heartbeat and its leases carry.
func NewWorkerID() string { return newID("wrk_") }
