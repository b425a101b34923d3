package storage

import (
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

// newID returns prefix + a ULID, so ids sort by creation time.
func newID(prefix string) string { return prefix + ulid.Make().String() }

// newIDTime returns prefix + a ULID of time t (to the millisecond): an
// event's id carries its created_at, so that the day partition its row
// goes to (migration 24) is the day of its created_at, and an archive of a
// range of times (ArchiveRows) holds exactly the partitions of its days.
func newIDTime(prefix string, t time.Time) string {
	return prefix + ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).String()
}

// newIDAt returns prefix + a ULID of the time of the ULID id carries after
// its prefix: a delivery's id has its event's time, so that both fall in
// the same day's partitions (migration 24). An id that carries no ULID
// (none the write path makes) gets the time of now.
func newIDAt(prefix, id string) string {
	ms := ulid.Now()
	if u, err := ulid.ParseStrict(id[len(prefixOf(id)):]); err == nil {
		ms = u.Time()
	}
	return prefix + ulid.MustNew(ms, ulid.DefaultEntropy()).String()
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
