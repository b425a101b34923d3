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

// newIDsTime returns n ids of prefix + a ULID of time t (to the
// millisecond), in increasing order: an event's id carries its created_at,
// so that the day partition its row goes to (migration 25) is the day of
// its created_at, and an archive of a range of times (ArchiveRows) holds
// exactly the partitions of its days. They are made under one lock, so
// that the events of one call (a bulk job's chunk) list in their order.
func newIDsTime(prefix string, t time.Time, n int) []string {
	out := make([]string, n)
	ids.Lock()
	defer ids.Unlock()
	for i := range out {
		out[i] = prefix + ulid.MustNew(ulid.Timestamp(t), ids.entropy).String()
	}
	return out
}

// newIDAt returns prefix + a ULID of the time of the ULID id carries after
// its prefix: a delivery's id has its event's time, so that both fall in
// the same day's partitions (migration 25). An id that carries no ULID
// (none the write path makes) gets the time of now.
func newIDAt(prefix, id string) string {
	ms := ulid.Now()
	if u, err := ulid.ParseStrict(id[len(prefixOf(id)):]); err == nil {
		ms = u.Time()
	}
	ids.Lock()
	defer ids.Unlock()
	return prefix + ulid.MustNew(ms, ids.entropy).String()
}

// prefixOf returns id's prefix, up to and with its first underscore.
func prefixOf(id string) string {
	for i := range len(id) {
		if id[i] == '_' {
			return id[:i+1]
		}
	}
	return ""
}

// idBound returns the smallest id of prefix minted at t or later: ids
// compare as their times do, so [idBound(p, a), idBound(p, b)) are the ids
// minted in [a, b). It is what webhookd_ulid_prefix computes in SQL.
func idBound(prefix string, t time.Time) string {
	var u ulid.ULID
	if err := u.SetTime(ulid.Timestamp(t)); err != nil {
		panic(err) // a time past the year 10889
	}
	return prefix + u.String()[:10]
}

// NewRequestID returns a fresh request id (req_ + ULID).
func NewRequestID() string { return newID(prefixRequest) }

// NewWorkerID returns a fresh worker process id (wrk_ + ULID), which its
// heartbeat and its leases carry.
func NewWorkerID() string { return newID("wrk_") }
