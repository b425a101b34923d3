package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/client"
)

// The outbox ledger decides an unanswered COMMIT by the service's own
// table, never counting it lost or a false positive, and catches a
// committed row with no event, a row made twice and a rolled-back row
// that became an event.
func TestCheckOutbox(t *testing.T) {
	tx := func(id string, out outboxOutcome, markers ...string) outboxTx {
		return outboxTx{id: id, markers: markers, types: make([]string, len(markers)), outcome: out}
	}
	txs := []outboxTx{
		tx("tx-0", outboxCommitted, "ob-0-0", "ob-0-1"),
		tx("tx-1", outboxRolledBack, "ob-1-0"),
		tx("tx-2", outboxFailed, "ob-2-0"),
		tx("tx-3", outboxMaybe, "ob-3-0"), // committed after all
		tx("tx-4", outboxMaybe, "ob-4-0"), // did not commit
	}
	src := &sourceState{committed: map[string]bool{"tx-0": true, "tx-3": true}}
	good := map[string][]string{"ob-0-0": {"evt_a"}, "ob-0-1": {"evt_b"}, "ob-3-0": {"evt_c"}}
	l := checkOutbox(txs, src, good, func(string, ...any) {})
	want := outboxLedger{Txs: 5, Rows: 6, TxsCommitted: 2, RowsCommitted: 3, TxsRolledBack: 1, TxsFailed: 1,
		TxsMaybe: 2, TxsMaybeCommitted: 1, RowsMoved: 3}
	if l != want {
		t.Errorf("a sound run:\n got %+v\nwant %+v", l, want)
	}
	if n := countFailures(l.failures); n != 0 {
		t.Errorf("a sound run fails %d checks", n)
	}

	bad := map[string][]string{"ob-0-0": {"evt_a", "evt_a2"}, "ob-1-0": {"evt_x"}, "ob-4-0": {"evt_y"}}
	l = checkOutbox(txs, src, bad, func(string, ...any) {})
	if l.RowsDoubled != 1 || l.RowsLost != 2 || l.RowsUncommittedDelivered != 2 {
		t.Errorf("doubled %d (want 1), lost %d (want 2: ob-0-1, ob-3-0), uncommitted delivered %d (want 2)",
			l.RowsDoubled, l.RowsLost, l.RowsUncommittedDelivered)
	}

	src.committed["tx-1"] = true // the database says a rolled-back transaction committed
	delete(src.committed, "tx-0")
	if l = checkOutbox(txs, src, good, func(string, ...any) {}); l.CommittedMissing != 1 || l.RolledBackFound != 1 {
		t.Errorf("contradictions: committed missing %d, rolled back found %d, want 1 and 1", l.CommittedMissing, l.RolledBackFound)
	}
}

// The bulk ledger wants every job that answered 202 succeeded with each
// line one event, nothing from a request without a 202, and no job that
// no request got back.
func TestCheckBulk(t *testing.T) {
	op := func(key, job string, markers ...string) *bulkOp {
		o := &bulkOp{key: key, jobID: job, tries: 1}
		for _, m := range markers {
			o.lines = append(o.lines, client.NewEvent{Type: "order.created"})
			o.markers = append(o.markers, m)
		}
		if job == "" {
			o.err = errors.New("503")
		}
		return o
	}
	ops := []*bulkOp{op("k0", "job_0", "bk-0-1", "bk-0-2"), op("k1", "job_1", "bk-1-1")}
	jobs := map[string]dbJob{"job_0": {status: "succeeded", total: 2, done: 2}, "job_1": {status: "succeeded", total: 1, done: 1}}
	events := map[string][]string{"bk-0-1": {"evt_a"}, "bk-0-2": {"evt_b"}, "bk-1-1": {"evt_c"}}
	l := checkBulk(ops, jobs, events, func(string, ...any) {})
	if l.Accepted != 2 || l.LinesAccepted != 3 || l.JobsSucceeded != 2 || countFailures(l.failures) != 0 {
		t.Errorf("a sound run: %+v, %d failures", l, countFailures(l.failures))
	}

	ops = append(ops, op("k2", "", "bk-2-1"))
	jobs["job_1"] = dbJob{status: "running", total: 1}
	jobs["job_9"] = dbJob{status: "succeeded"}
	events["bk-0-2"] = append(events["bk-0-2"], "evt_b2")
	events["bk-2-1"] = []string{"evt_d"}
	delete(events, "bk-1-1")
	var examples []string
	l = checkBulk(ops, jobs, events, func(f string, a ...any) { examples = append(examples, f) })
	if l.NotAccepted != 1 || l.JobsNotFinished != 1 || l.JobsUnknown != 1 || l.LinesDoubled != 1 ||
		l.LinesLost != 1 || l.LinesUnaccepted != 1 {
		t.Errorf("a broken run: %+v", l)
	}
	if countFailures(l.failures) != 6 {
		t.Errorf("a broken run fails %d checks, want 6:\n%s", countFailures(l.failures), strings.Join(examples, "\n"))
	}
}

func countFailures(check func(func(bool, string, ...any))) (n int) {
	check(func(cond bool, _ string, _ ...any) {
		if cond {
			n++
		}
	})
	return n
}
