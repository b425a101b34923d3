package dispatcher

import (
	"sync/atomic"
	"time"

	"github.com/webhookd/webhookd"
)

// dbClock is PostgreSQL's clock as this process last read it: its own
// clock plus the offset of PostgreSQL's, learnt from every claim (which
// reads now() in the same round trip). Leases, due times, probe times and
// Retry-After waits are compared between processes, so every process
// takes them from this one clock (SPEC §1); a worker whose own clock runs
// ahead neither attempts early nor takes others' leases early.
type dbClock struct {
	base   webhookd.Clock
	offset atomic.Int64 // PostgreSQL's time minus base's, in nanoseconds
}

func newDBClock(base webhookd.Clock) *dbClock { return &dbClock{base: base} }

// Now is PostgreSQL's time now, as far as this process knows it.
func (c *dbClock) Now() time.Time { return c.base.Now().Add(time.Duration(c.offset.Load())) }

// learn takes db, a time PostgreSQL just read, as its clock's now.
func (c *dbClock) learn(db time.Time) {
	if !db.IsZero() {
		c.offset.Store(int64(db.Sub(c.base.Now())))
	}
}
