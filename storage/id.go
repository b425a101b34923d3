package storage

import (
	"math/rand"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

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

// newID returns prefix + a ULID, so ids sort by creation time: those this
// process makes, strictly (a bulk job's events list in line order).
// ulid.Make does not promise that: it reads the millisecond before its
// lock, and a call that waited there behind a later one resets the
// shared entropy to random within the millisecond.
func newID(prefix string) string {
	ids.Lock()
	defer ids.Unlock()
	return prefix + ulid.MustNew(ulid.Now(), ids.entropy).String()
}

// ids makes this process's ULIDs, one at a time.
var ids = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.New(rand.NewSource(time.Now().UnixNano())), 0)}

// NewRequestID returns a fresh request id (req_ + ULID).
func NewRequestID() string { return newID(prefixRequest) }

// NewWorkerID returns a fresh worker process id (wrk_ + ULID), which its
// heartbeat and its leases carry.
func NewWorkerID() string { return newID("wrk_") }
