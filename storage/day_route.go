package storage

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oklog/ulid/v2"
)

// dayRoutes tells which day's partition (migration 25) an id's row is in,
// so that the statements run for every delivery (the claim, the record)
// name that partition rather than its partitioned parent.
//
// Why: PostgreSQL 15 locks, at the start of every run of a generic plan,
// every partition the plan names, and a plan of a partitioned parent
// joined by key names them all; the hot statements run generic plans
// (planSettings). Through the parent a statement's cost so grows with the
// days kept; through the one partition the id names it is the cost of an
// unpartitioned table (BENCHMARKS.md, issue 34). An insert through the
// parent opens only the partition its row goes to, so inserts need none of
// this.
//
// The days are read from history_partitions and read again when an id
// falls in none of them (a day made since, at most once a second) or a
// statement names a partition dropped since (forget): an id in no day
// made goes to the parent, which finds its row wherever it is (the
// default partition, or nowhere: purged).
type dayRoutes struct {
	mu     sync.Mutex
	days   []Day // oldest first
	loaded time.Time
}

// reloadEvery bounds how often a miss reads history_partitions again.
const reloadEvery = time.Second

// suffix returns the partition suffix of the day id's time falls in
// ("legacy" for one before the history was partitioned), or "" for none
// made: use the parent.
func (r *dayRoutes) suffix(ctx context.Context, q querier, id string) string {
	u, err := ulid.ParseStrict(id[len(prefixOf(id)):])
	if err != nil {
		return "" // no time: the default partition, through the parent
	}
	t := ulid.Time(u.Time())
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.find(t); s != "" {
		return s
	}
	if time.Since(r.loaded) < reloadEvery {
		return ""
	}
	r.loaded = time.Now()
	rows, err := q.Query(ctx, `SELECT suffix, lo, hi FROM history_partitions ORDER BY hi`)
	if err != nil {
		return ""
	}
	var days []Day
	for rows.Next() {
		var d Day
		if rows.Scan(&d.Suffix, &d.Lo, &d.Hi) != nil {
			rows.Close()
			return ""
		}
		days = append(days, d)
	}
	if rows.Err() != nil {
		return ""
	}
	r.days = days
	return r.find(t)
}

// find is suffix among the days known, with r.mu held.
func (r *dayRoutes) find(t time.Time) string {
	i := sort.Search(len(r.days), func(i int) bool { return t.Before(r.days[i].Hi) })
	if i < len(r.days) && !t.Before(r.days[i].Lo) {
		return r.days[i].Suffix
	}
	return ""
}

// forget drops the days known when err says a statement named a partition
// that is gone (retention dropped its day): the next id is routed afresh.
func (r *dayRoutes) forget(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		r.mu.Lock()
		r.days, r.loaded = nil, time.Time{}
		r.mu.Unlock()
	}
}

// daySQL is a statement for each day's partitions, built once per suffix
// and kept: the hot statements (claimSQL, recordSQL) are the same text for
// every batch of a day, and building it for every batch was about 1 % of
// the worker's CPU under a stream of single events. A process sees a new
// suffix once a day.
type daySQL struct {
	build func(suffix string) string
	made  sync.Map // suffix → statement
}

// get returns the statement for suffix's partitions.
func (c *daySQL) get(suffix string) string {
	if s, ok := c.made.Load(suffix); ok {
		return s.(string)
	}
	s := c.build(suffix)
	c.made.Store(suffix, s)
	return s
}

// partition returns table's partition of suffix, or table for "".
func partition(table, suffix string) string {
	if suffix == "" {
		return table
	}
	return table + "_" + suffix
}

// byDay splits ids' indexes by the day partition each id is in, in the
// order days first appear: a batch of one day (nearly all) is one group.
func (r *dayRoutes) byDay(ctx context.Context, q querier, ids []string) (suffixes []string, groups [][]int) {
	at := map[string]int{}
	for i, id := range ids {
		s := r.suffix(ctx, q, id)
		g, ok := at[s]
		if !ok {
			g = len(groups)
			at[s] = g
			suffixes, groups = append(suffixes, s), append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return suffixes, groups
}
