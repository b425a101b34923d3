package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// stuckGroup is a group of deliveries still waiting after the drain, as
// PostgreSQL has them: what a reader needs to tell which wait never ended.
type stuckGroup struct {
	Endpoint, Status, Reason string
	Count, Leased            int
	Earliest, Latest         time.Duration // next_attempt_at less the time of the look
}

// stuckHead is an ordered endpoint's head after the drain.
type stuckHead struct {
	Endpoint, ID, Status, Reason string
	Seq                          int64
	Attempts                     int
	Due, LeaseLeft, Updated      time.Duration // next_attempt_at, lease_until, updated_at less now
}

// stuckState is where an undrained backlog waits, and what the live
// workers' heartbeats say of its endpoints (limit, in flight).
type stuckState struct {
	Groups []stuckGroup
	Heads  []stuckHead
	Loads  []string
}

// readStuck reads where the deliveries still waiting after the drain wait.
func (s *chaosSystem) readStuck(ctx context.Context) (*stuckState, error) {
	conn, err := pgx.Connect(ctx, s.db.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st := &stuckState{}
	rows, err := conn.Query(ctx, `SELECT endpoint_id, status, coalesce(waiting_reason, ''), count(*),
			count(*) FILTER (WHERE lease_until > now()),
			extract(epoch FROM min(next_attempt_at) - now()), extract(epoch FROM max(next_attempt_at) - now())
		FROM deliveries WHERE status IN ('pending', 'retrying') GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 40`)
	if err != nil {
		return nil, err
	}
	var (
		ep          string
		g           stuckGroup
		early, late float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&ep, &g.Status, &g.Reason, &g.Count, &g.Leased, &early, &late}, func() error {
		g.Endpoint, g.Earliest, g.Latest = s.nameOf(ep), secs(early), secs(late)
		st.Groups = append(st.Groups, g)
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT DISTINCT ON (endpoint_id) endpoint_id, id, status, coalesce(waiting_reason, ''),
			fifo_seq, attempts_count, extract(epoch FROM next_attempt_at - now()),
			coalesce(extract(epoch FROM lease_until - now()), 0), extract(epoch FROM updated_at - now())
		FROM deliveries WHERE fifo_seq IS NOT NULL AND status IN ('pending', 'retrying') ORDER BY endpoint_id, fifo_seq`)
	if err != nil {
		return nil, err
	}
	var (
		h            stuckHead
		due, ls, upd float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&ep, &h.ID, &h.Status, &h.Reason, &h.Seq, &h.Attempts, &due, &ls, &upd}, func() error {
		h.Endpoint, h.Due, h.LeaseLeft, h.Updated = s.nameOf(ep), secs(due), secs(ls), secs(upd)
		st.Heads = append(st.Heads, h)
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT w.id, extract(epoch FROM now() - w.beat_at), l.key, l.value::text
		FROM workers w, jsonb_each(w.limits) l
		WHERE l.key IN (SELECT endpoint_id FROM deliveries WHERE status IN ('pending', 'retrying'))
		ORDER BY 1, 3`)
	if err != nil {
		return nil, err
	}
	var (
		worker, load string
		ago          float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&worker, &ago, &ep, &load}, func() error {
		st.Loads = append(st.Loads, fmt.Sprintf("%s (beat %s ago): %s [limit, in flight] %s", worker, secs(ago), s.nameOf(ep), load))
		return nil
	}); err != nil {
		return nil, err
	}
	return st, nil
}

// nameOf is the receiver's name of endpoint id, or the id.
func (s *chaosSystem) nameOf(id string) string {
	if n, ok := s.endpointNames[id]; ok {
		return n
	}
	return id
}

func secs(f float64) time.Duration {
	return time.Duration(f * float64(time.Second)).Round(100 * time.Millisecond)
}

// writeStuck writes where an undrained backlog waits.
func (st *stuckState) write(p func(string, ...any)) {
	p("## Where the undrained backlog waits")
	p("")
	p("Read from PostgreSQL after the drain: times are relative to that look (negative: overdue).")
	p("")
	p("| endpoint | status | waiting_reason | deliveries | leased | next_attempt_at, earliest | latest |")
	p("|---|---|---|---:|---:|---:|---:|")
	for _, g := range st.Groups {
		p("| %s | %s | %s | %d | %d | %s | %s |", g.Endpoint, g.Status, orNone(g.Reason), g.Count, g.Leased, g.Earliest, g.Latest)
	}
	p("")
	if len(st.Heads) > 0 {
		p("| ordered head | delivery | status | waiting_reason | fifo_seq | attempts | next_attempt_at | lease left | updated |")
		p("|---|---|---|---|---:|---:|---:|---:|---:|")
		for _, h := range st.Heads {
			p("| %s | %s | %s | %s | %d | %d | %s | %s | %s |", h.Endpoint, h.ID, h.Status, orNone(h.Reason), h.Seq,
				h.Attempts, h.Due, h.LeaseLeft, h.Updated)
		}
		p("")
	}
	for _, l := range st.Loads {
		p("- %s", l)
	}
	if len(st.Loads) > 0 {
		p("")
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
