package storage

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/filter"
)

// endpointCache holds, per project, the endpoints an event request may
// match, as a group last read them, so that a group matches its events in
// memory and writes in one round trip. It may be stale: the group's
// statement compares, per project, the digest of the candidates it matched
// from (candidateDigest) with the same digest of the table and writes
// nothing for a project whose endpoints changed; that project's requests
// read them again and go once more.
type endpointCache struct {
	mu    sync.Mutex
	m     map[string][]endpointMatch // by project, in id order (bytewise), deleted ones left out
	count int                        // endpoints held
}

// maxCachedEndpoints bounds the cache; past it, it starts again empty.
const maxCachedEndpoints = 200_000

// endpoints returns the endpoints of projects, reading those the cache
// lacks on q (the pool, holding no other connection, or the caller's
// transaction).
func (db *DB) endpoints(ctx context.Context, q querier, projects []string) (map[string][]endpointMatch, error) {
	c := &db.cache
	out := make(map[string][]endpointMatch, len(projects))
	var missing []string
	c.mu.Lock()
	for _, p := range projects {
		if eps, ok := c.m[p]; ok {
			out[p] = eps
		} else {
			missing = append(missing, p)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT project_id, id, event_types, status = 'active', ordering = 'fifo', version, filter
		FROM endpoints WHERE project_id = ANY($1) AND deleted_at IS NULL ORDER BY project_id, id COLLATE "C"`, missing)
	if err != nil {
		return nil, err
	}
	var (
		e    endpointMatch
		flt  []byte
		read = make(map[string][]endpointMatch, len(missing))
	)
	if _, err := pgx.ForEachRow(rows, []any{&e.projectID, &e.id, &e.types, &e.active, &e.fifo, &e.version, &flt}, func() error {
		e.filter, _ = filter.Compile(flt)
		read[e.projectID] = append(read[e.projectID], e)
		e.types = nil // the next row's scan must not reuse its array
		return nil
	}); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range missing {
		if c.m == nil || c.count+len(read[p]) > maxCachedEndpoints {
			c.m, c.count = map[string][]endpointMatch{}, 0
		}
		c.m[p], c.count = read[p], c.count+len(read[p])
		out[p] = read[p]
	}
	return out, nil
}

// forgetEndpoints drops projects from the cache: their endpoints changed.
func (db *DB) forgetEndpoints(projects []string) {
	c := &db.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range projects {
		c.count -= len(c.m[p])
		delete(c.m, p)
	}
}

// candidates are the endpoints a group's events can go to: those listed by
// id, and the active ones subscribed to one of the group's types or to all.
// The group's statement reads the same set (writeGroupSQL's fresh).
func candidates(eps []endpointMatch, listed, types []string) []endpointMatch {
	ids, subscribed := setOf(listed), setOf(types)
	var out []endpointMatch
	for _, e := range eps {
		if ids[e.id] || e.active && (len(e.types) == 0 || slices.ContainsFunc(e.types, func(t string) bool { return subscribed[t] })) {
			out = append(out, e)
		}
	}
	return out
}

func setOf(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// candidateDigest is the digest writeGroupSQL computes of candidates in id
// order: md5 of "id:version", joined by commas. Every change that matters
// to matching (status, event types, ordering) bumps an endpoint's version;
// a deleted endpoint leaves the set.
func candidateDigest(eps []endpointMatch) string {
	var b strings.Builder
	for i, e := range eps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.id)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.version))
	}
	sum := md5.Sum([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
