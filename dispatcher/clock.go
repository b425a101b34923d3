package dispatcher

import (
	"sync"
	"time"

	"github.com/webhookd/webhookd"
)

// dbClock is PostgreSQL's clock as this process last read it: its own
// clock plus the offset of PostgreSQL's, learnt from every claim (which
// reads now() in the same round trip). Leases, due times, probe times and
// Retry-After waits are compared between processes, so every process
// takes them from this one clock (SPEC §1); a worker whose own clock runs
// ahead neither attempts early nor takes others' leases early.
//
// A reading of now() comes after the request was sent, so now() minus the
// sending time is the offset plus the delay before the statement started:
// the smallest of those within a window is the best estimate (and never
// lags PostgreSQL, which would make a delivery just made look not due).
type dbClock struct {
	base webhookd.Clock
	mu   sync.Mutex
	off  time.Duration // PostgreSQL's time minus base's, as best known
	at   time.Time     // when off was taken (base's time)
}

// Now is PostgreSQL's time now, as far as this process knows it.
func (c *dbClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Now().Add(c.off)
}

// clockWindow is how long an offset reading stands unless a smaller one
// comes: the clocks may be adjusted, and a reading must not stand forever.
const clockWindow = 10 * time.Second

// learn takes db, a time PostgreSQL read in answer to a request sent at
// sent (base's time), as a reading of the offset.
func (c *dbClock) learn(db, sent time.Time) {
	if db.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if off := db.Sub(sent); off < c.off || sent.Sub(c.at) > clockWindow || c.at.IsZero() {
		c.off, c.at = off, sent
	}
}

// sent is base's time now, for a reading that learn takes later.
func (c *dbClock) sent() time.Time { return c.base.Now() }
