package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Day is one day's partitions of the history (migration 25): the events
// minted in [Lo, Hi) and their deliveries, attempts and dead letters. The
// legacy day (Suffix "legacy") is what an installation held before the
// history was partitioned, from the epoch (Lo) to Hi.
type Day struct {
	Suffix string // pYYYYMMDD, or legacy
	Lo, Hi time.Time
}

// historyTables are the partitioned tables, each with the prefix of its
// partition key: a day's partitions of all four go together.
var historyTables = []struct{ name, prefix, with string }{
	{"events", prefixEvent, ""},
	{"deliveries", prefixDelivery, " WITH (fillfactor = 40)"}, // room for HOT lease updates (00016)
	{"attempts", prefixDelivery, ""},
	{"dead_letters", prefixDelivery, ""},
}

// dayLength is a partition's span.
const dayLength = 24 * time.Hour

// EnsurePartitions makes the days that start before now + ahead and are
// not made yet, each in a transaction of its own, and returns those it
// made. Days follow the last one made (the legacy one, at first), so they
// never overlap. A day that has begun is made too, unless a default
// partition already holds rows of it — after a pause of every worker
// longer than ahead, while the API went on: PostgreSQL refuses a partition
// whose rows its default holds, so such a day is passed over, its rows
// stay in the default partitions (purged row by row), and the days after
// it are made.
func (s *Store) EnsurePartitions(ctx context.Context, now time.Time, ahead time.Duration) ([]Day, error) {
	return s.makeDays(ctx, now.UTC().Truncate(dayLength), now, ahead, true)
}

// makeDays is EnsurePartitions, beginning at first when no day is made
// (every one was dropped); passOver says whether a begun day whose rows a
// default partition holds is passed over (else making it fails).
func (s *Store) makeDays(ctx context.Context, first, now time.Time, ahead time.Duration, passOver bool) ([]Day, error) {
	var made []Day
	var passed time.Time // the end of the last day passed over
	for {
		var lastp *time.Time
		if err := s.q.QueryRow(ctx, `SELECT max(hi) FROM history_partitions`).Scan(&lastp); err != nil {
			return made, fmt.Errorf("partitions: last day: %w", err)
		}
		last := first
		if lastp != nil {
			last = *lastp
		}
		if passed.After(last) {
			last = passed
		}
		if !last.Before(now.Add(ahead)) {
			return made, nil
		}
		lo := last.UTC().Truncate(dayLength) // days start at midnight UTC
		if lo.Before(last) {
			lo = lo.Add(dayLength) // a legacy day ends at one, normally
		}
		d := Day{Suffix: "p" + lo.Format("20060102"), Lo: lo, Hi: lo.Add(dayLength)}
		if lo.After(last) { // a legacy day that ended at another time: the gap is one more day
			d = Day{Suffix: "p" + last.UTC().Format("20060102"), Lo: last, Hi: lo}
		}
		if passOver && d.Lo.Before(now) {
			held, err := s.defaultHolds(ctx, d)
			if err != nil {
				return made, err
			}
			if held {
				passed = d.Hi
				continue
			}
		}
		// One table at a time, each in a transaction of its own: making a
		// partition locks its table, and a transaction that held one
		// table's lock while it waited for another's would deadlock with
		// statements that lock them in the other order (an ingest takes
		// events then deliveries, a claim deliveries then events). A
		// bounded wait: the next pass tries again.
		var err error
		for _, t := range historyTables {
			if err = s.ddl(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s_%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')%s`,
				t.name, d.Suffix, t.name, idBound(t.prefix, d.Lo), idBound(t.prefix, d.Hi), t.with)); err != nil {
				break
			}
		}
		if err == nil {
			_, err = s.q.Exec(ctx, `INSERT INTO history_partitions (suffix, lo, hi) VALUES ($1, $2, $3)`, d.Suffix, d.Lo, d.Hi)
		}
		if err != nil {
			return made, fmt.Errorf("partitions: make %s: %w", d.Suffix, err)
		}
		made = append(made, d)
	}
}

// defaultHolds reports whether a default partition holds rows of day d.
func (s *Store) defaultHolds(ctx context.Context, d Day) (bool, error) {
	var held bool
	err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events_default WHERE id >= $1 AND id < $2)
		OR EXISTS (SELECT 1 FROM deliveries_default WHERE id >= $3 AND id < $4)
		OR EXISTS (SELECT 1 FROM attempts_default WHERE delivery_id >= $3 AND delivery_id < $4)
		OR EXISTS (SELECT 1 FROM dead_letters_default WHERE delivery_id >= $3 AND delivery_id < $4)`,
		idBound(prefixEvent, d.Lo), idBound(prefixEvent, d.Hi), idBound(prefixDelivery, d.Lo), idBound(prefixDelivery, d.Hi)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("partitions: default rows of %s: %w", d.Suffix, err)
	}
	return held, nil
}

// Days returns the days made, oldest first.
func (s *Store) Days(ctx context.Context) ([]Day, error) {
	rows, err := s.q.Query(ctx, `SELECT suffix, lo, hi FROM history_partitions ORDER BY hi`)
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Day, error) {
		var d Day
		err := r.Scan(&d.Suffix, &d.Lo, &d.Hi)
		return d, err
	})
}

// ErrDayWaits is what DropDay answers for a day that still holds a
// delivery waiting for an attempt, asked to be redelivered, or held by
// one: nothing that waits is ever purged (SPEC §4).
var ErrDayWaits = errors.New("a delivery of that day still waits")

// DropDay drops a day's partitions of the four tables, with the external
// ids of its events, unless a delivery of the day still waits (ErrDayWaits:
// its partitions stay, whole, until none does).
//
// Each table's partition is detached in a transaction of its own that
// locks that table alone (see makeDays: no transaction holds one table's
// lock while it waits for another's), deliveries first: under its lock,
// which stops every access to deliveries while it is held, the day is
// asked whether a delivery waits (dayWaits, by indexes only: milliseconds),
// so that none can start to wait between the check and the detach. The
// detached tables are then dropped, which locks nothing in use. A pass cut
// short is finished by the next: a partition detached already is not
// checked again.
func (s *Store) DropDay(ctx context.Context, d Day) error { return s.dropDay(ctx, d, nil) }

// DayRows counts a day's rows, table by table: what an archive of it holds.
type DayRows struct{ Events, Deliveries, Attempts, DeadLetters int64 }

// ErrDayChanged is what DropArchivedDay answers for a day whose partitions
// no longer hold the rows archived.
var ErrDayChanged = errors.New("the day's rows changed since it was archived")

// DropArchivedDay is DropDay for a day written to the archive, whose rows
// were counted then: it drops the day only if its partitions hold as many
// rows each as archived — else ErrDayChanged, and the day stays, whole, to
// be archived again. The rows are counted before the lock of deliveries
// (seconds at a million deliveries): attempts and dead letters are only
// ever written with their delivery's row, no event is minted in a past
// day, and a delivery that starts to wait after the count keeps the day
// (the check under the lock). What this misses: a redelivery or replay of
// a delivery of the day — older than the retention — asked for, made and
// recorded in the milliseconds between the count and the lock; its
// attempt is then in no archive.
func (s *Store) DropArchivedDay(ctx context.Context, d Day, archived DayRows) error {
	return s.dropDay(ctx, d, &archived)
}

// dropDay is DropDay, checking the day's rows against archived if given.
func (s *Store) dropDay(ctx context.Context, d Day, archived *DayRows) error {
	var attached bool
	if err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits
		WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass('deliveries'))`, "deliveries_"+d.Suffix).Scan(&attached); err != nil {
		return fmt.Errorf("partitions: deliveries_%s: %w", d.Suffix, err)
	}
	if attached {
		// Asked first without the lock too: a day that waits is known
		// without stopping anything, and the pages the check reads are
		// then in memory when it runs again under the lock (120 ms cold
		// for a day of a million deliveries, 10,000 of them dead letters).
		if waits, err := dayWaits(ctx, s.q, d); err != nil || waits {
			return cmp.Or(err, ErrDayWaits)
		}
	}
	if attached && archived != nil {
		now, err := countDay(ctx, s.q, d)
		if err != nil {
			return fmt.Errorf("partitions: count %s: %w", d.Suffix, err)
		}
		if now != *archived {
			return fmt.Errorf("partitions: %s holds %+v, archived %+v: %w", d.Suffix, now, *archived, ErrDayChanged)
		}
	}
	for _, t := range []string{"deliveries", "dead_letters", "attempts", "events"} {
		part := t + "_" + d.Suffix
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`, t)); err != nil {
				return fmt.Errorf("partitions: lock %s: %w", t, err)
			}
			var attached bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits
				WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))`, part, t).Scan(&attached); err != nil {
				return fmt.Errorf("partitions: %s: %w", part, err)
			}
			if !attached {
				return nil
			}
			if t == "deliveries" {
				waits, err := dayWaits(ctx, tx, d)
				if err != nil {
					return err
				}
				if waits {
					return ErrDayWaits
				}
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, t, part)); err != nil {
				return fmt.Errorf("partitions: detach %s: %w", part, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	lo, hi := idBound(prefixEvent, d.Lo), idBound(prefixEvent, d.Hi)
	if d.Suffix == "legacy" {
		lo = prefixEvent
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM event_external_ids WHERE event_id >= $1 AND event_id < $2`, lo, hi); err != nil {
			return fmt.Errorf("partitions: external ids of %s: %w", d.Suffix, err)
		}
		for _, t := range []string{"dead_letters", "attempts", "deliveries", "events"} {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s_%s`, t, d.Suffix)); err != nil {
				return fmt.Errorf("partitions: drop %s_%s: %w", t, d.Suffix, err)
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM history_partitions WHERE suffix = $1`, d.Suffix)
		return err
	})
}

// DayWaits reports whether a delivery of day d still waits (DropDay's
// check, without its lock): retention asks before archiving a day it
// could not drop.
func (s *Store) DayWaits(ctx context.Context, d Day) (bool, error) { return dayWaits(ctx, s.q, d) }

// dayWaits asks whether a delivery of day d waits for an attempt or a
// redelivery, or is leased, each by an index: a wait for an attempt by
// deliveries_due_idx, a redelivery by deliveries_manual_request_idx, and a
// lease among the deliveries that did not succeed (deliveries_status_idx):
// an attempt leases a delivery that waits for it (ClaimAuto), whose
// redelivery was asked for (ClaimManual) or that is a dead letter
// (ClaimReplay), never a delivery that succeeded and waits for nothing
// (ClaimAny is for tests). A scan of the day for leases would take seconds
// at a million deliveries, under the lock that stops every claim.
func dayWaits(ctx context.Context, q querier, d Day) (bool, error) {
	var waits bool
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM deliveries_%[1]s WHERE next_attempt_at IS NOT NULL)
		OR EXISTS (SELECT 1 FROM deliveries_%[1]s WHERE manual_request_id IS NOT NULL)
		OR EXISTS (SELECT 1 FROM deliveries_%[1]s WHERE status <> 'succeeded' AND lease_owner IS NOT NULL)`,
		d.Suffix)).Scan(&waits); err != nil {
		return false, fmt.Errorf("partitions: check deliveries_%s: %w", d.Suffix, err)
	}
	return waits, nil
}

// countDay counts the rows of day d's four partitions.
func countDay(ctx context.Context, q querier, d Day) (DayRows, error) {
	var n DayRows
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM events_%[1]s), (SELECT count(*) FROM deliveries_%[1]s),
		(SELECT count(*) FROM attempts_%[1]s), (SELECT count(*) FROM dead_letters_%[1]s)`, d.Suffix)).
		Scan(&n.Events, &n.Deliveries, &n.Attempts, &n.DeadLetters)
	return n, err
}

// ddl runs one statement of DDL in a transaction of its own, waiting at
// most 5 s for its locks.
func (s *Store) ddl(ctx context.Context, sql string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	})
}

// StartDaysAt makes the days begin at from's day (UTC), for a history
// loaded from elsewhere into a new database (webhookd-bench's generator):
// the legacy day, which must be empty, is dropped, and the days from
// from's day up to now + ahead are made.
func (s *Store) StartDaysAt(ctx context.Context, from, now time.Time, ahead time.Duration) error {
	days, err := s.Days(ctx)
	if err != nil {
		return err
	}
	if len(days) != 1 || days[0].Suffix != "legacy" {
		return fmt.Errorf("partitions: days were made already (%d)", len(days))
	}
	var rows int64
	if err := s.q.QueryRow(ctx, `SELECT (SELECT count(*) FROM events_legacy) + (SELECT count(*) FROM deliveries_legacy)`).Scan(&rows); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	if rows != 0 {
		return fmt.Errorf("partitions: the legacy partitions hold %d rows", rows)
	}
	if err := s.DropDay(ctx, days[0]); err != nil {
		return err
	}
	_, err = s.makeDays(ctx, from.UTC().Truncate(dayLength), now, ahead, false)
	return err
}
