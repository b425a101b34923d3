package outbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SourceStatus is how the moves of one source go (Relay.Status), for
// /readyz. It names the source and says why it fails in words of its own,
// never a host, user, password or driver error: those stay in the log.
type SourceStatus struct {
	// Name is the source's project, with "#n" (its place among the
	// project's sources in Config.Sources, from 1) when the project has
	// several.
	Name string
	// State is "starting" until the first poll ends, then "ok" while the
	// last poll or move succeeded, else "failing".
	State string
	// Since is when State last changed (the Relay's start for "starting").
	Since time.Time
	// Error says why the last poll or move failed; "" unless failing.
	Error string
}

// status is a mover's SourceStatus, changed by each poll's outcome.
type status struct {
	mu sync.Mutex
	s  SourceStatus
}

// record sets the outcome of a poll or move that ended at now.
func (st *status) record(err error, now time.Time) {
	state, why := "ok", ""
	if err != nil {
		state, why = "failing", describe(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.s.State != state {
		st.s.State, st.s.Since = state, now.UTC()
	}
	st.s.Error = why
}

func (st *status) get() SourceStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// writeError is a failure of the Writer (webhookd's own store), not of
// the source.
type writeError struct{ err error }

func (e writeError) Error() string { return "write to webhookd: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

// describe says why a poll or move failed in words that are safe to show:
// the kind of failure, a SQLSTATE at most.
func describe(err error) string {
	var (
		we  writeError
		ce  *pgconn.ConnectError
		pge *pgconn.PgError
	)
	switch {
	case errors.As(err, &we):
		return "writing the rows to webhookd failed"
	case errors.As(err, &ce):
		return "cannot connect to the source database"
	case errors.Is(err, context.DeadlineExceeded):
		return "the source database did not answer in time"
	case errors.As(err, &pge) && pge.Code == "42P01":
		return "webhookd_outbox is missing in the source database (webhookd outbox init)"
	case errors.As(err, &pge) && strings.HasPrefix(pge.Code, "28"):
		return "the source database refused the login"
	case errors.As(err, &pge):
		return "the source database answered SQLSTATE " + pge.Code
	}
	return "moving rows from the source database failed"
}

// sourceNames names each source for Status: its project, with "#n" when
// the project has several.
func sourceNames(sources []Source) []string {
	count := map[string]int{}
	for _, s := range sources {
		count[s.Project]++
	}
	seen := map[string]int{}
	out := make([]string, len(sources))
	for i, s := range sources {
		out[i] = s.Project
		if count[s.Project] > 1 {
			seen[s.Project]++
			out[i] += "#" + strconv.Itoa(seen[s.Project])
		}
	}
	return out
}
