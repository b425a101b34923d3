package storage

import (
	"encoding/binary"
	"math/rand/v2"
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

// newID returns prefix + a ULID of now, so ids sort by creation time:
// those this process makes, strictly (mint).
func newID(prefix string) string { return prefix + mint(ulid.Now()).String() }

// newIDsTime returns n ids of prefix + a ULID of time t (to the
// millisecond), in increasing order: an event's id carries its created_at,
// so that the day partition its row goes to (migration 25) is the day of
// its created_at, and an archive of a range of times (ArchiveRows) holds
// exactly the partitions of its days.
func newIDsTime(prefix string, t time.Time, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + mint(ulid.Timestamp(t)).String()
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
	return prefix + mint(ms).String()
}

// mint returns a ULID of millisecond ms greater than every other this
// process made of that millisecond: the first of a millisecond has random
// entropy, each later one the previous one's plus one. So ids of one
// millisecond sort in the order they were made whatever was made between
// them — ids of other milliseconds are made all the time (an event's id
// has its created_at, which a caller or a test clock gives; a request id
// has now), and a single monotonic entropy (ulid.Monotonic) goes back to
// random at each change of millisecond, which let a later event of the
// same millisecond sort first. ulid.Make also reads the millisecond
// outside its lock.
func mint(ms uint64) ulid.ULID {
	ids.Lock()
	defer ids.Unlock()
	ids.n++
	m, ok := ids.last[ms]
	u := m.id
	if !ok || !increment(&u) {
		u = ulid.ULID{}
		if err := u.SetTime(ms); err != nil {
			panic(err) // a time past the year 10889
		}
		binary.BigEndian.PutUint16(u[6:8], uint16(rand.Uint32()))
		binary.BigEndian.PutUint64(u[8:], rand.Uint64())
		u[6] &= 0x7f // room to count up from it
	}
	if !ok && len(ids.last) >= idMillis {
		// Forget the milliseconds least recently minted: ids made of one
		// since stay unique, only their order after the earlier ones of
		// that millisecond is lost.
		for k, v := range ids.last {
			if ids.n-v.n > idMillis/2 {
				delete(ids.last, k)
			}
		}
	}
	ids.last[ms] = minted{u, ids.n}
	return u
}

// idMillis bounds how many milliseconds mint remembers.
const idMillis = 4096

// increment adds one to u's entropy, false when it would overflow.
func increment(u *ulid.ULID) bool {
	for i := len(u) - 1; i >= 6; i-- {
		u[i]++
		if u[i] != 0 {
			return true
		}
	}
	return false
}

// ids is what mint remembers: the last ULID of each millisecond minted
// lately, with the count of mints when it was made.
var ids = struct {
	sync.Mutex
	n    uint64
	last map[uint64]minted
}{last: map[uint64]minted{}}

type minted struct {
	id ulid.ULID
	n  uint64
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
