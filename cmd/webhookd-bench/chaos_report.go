package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// chaosReport is what a soak found, as RELIABILITY.md shows it.
type chaosReport struct {
	Opts        *chaosOptions
	Date        time.Time
	Commit      string // the tree the report was written from
	Binary      string // the webhookd binary soaked, with the revision it was built from
	Machine     string
	Postgres    string
	Command     string
	Ran         time.Duration // load and faults
	DrainTook   time.Duration // from the end of the faults until nothing waited
	Drained     bool
	Resolved    int
	Plan        []plannedFault
	Faults      []faultRecord
	Recovery    map[string]time.Duration // kind -> longest recovery after it
	Ledger      chaosLedger
	Seams       seamLedger
	Answers     answerCounts
	RSS         []rssLine
	Failures    []string
	FaultErrors []string
	Stuck       *stuckState // where the backlog waits, when it did not drain
}

// answerCounts sorts every try of the senders.
type answerCounts struct {
	Tries, Accepted                 int
	Unavailable, UnavailableNoRetry int // 503 with and without Retry-After
	Timeouts, NoAnswer              int // client-visible timeouts; other failures to get an answer
	OutsideOutage                   int // a 5xx or no answer outside every fault
	OtherStatus                     map[int]int
	InProgress, RateLimited         int // 409 idempotency_key_in_progress, 429
	Examples                        []string
}

// rssLine is one process slot's resident set over the soak.
type rssLine struct {
	Name                 string
	Incarnations         int
	Early, Late, Highest int64 // the longest-lived incarnation's median in its first and last third after warm-up
	Flat                 bool
	Judged               bool // the window past warm-up is long enough to tell a leak (rssJudgedSpan)
}

// verdict is the table's word for Flat.
func (l rssLine) verdict() string {
	switch {
	case !l.Judged:
		return "too short to judge"
	case l.Flat:
		return "yes"
	}
	return "no"
}

func buildChaosReport(ctx context.Context, o *chaosOptions, sys *chaosSystem, load *chaosLoad, live *livenessSampler,
	faults []faultRecord, plan []plannedFault, start, faultsOver time.Time, resolved int) (*chaosReport, error) {
	r := &chaosReport{Opts: o, Date: time.Now().UTC(), Commit: gitCommit(o.Out), Binary: describeBinary(o.Webhookd), Machine: machine(),
		Command: commandLine(), Ran: faultsOver.Sub(start), Plan: plan, Faults: faults, Resolved: resolved,
		Recovery: make(map[string]time.Duration)}
	r.Postgres, _ = postgresVersion(ctx, sys.pg.AdminURL())
	n, err := sys.waiting(ctx)
	if err != nil {
		return nil, err
	}
	r.Drained = n == 0
	r.DrainTook = time.Since(faultsOver)
	if !r.Drained {
		if r.Stuck, err = sys.readStuck(ctx); err != nil {
			return nil, err
		}
	}
	st, err := sys.readState(ctx)
	if err != nil {
		return nil, err
	}
	r.Ledger = checkLedger(load, sys.recv, st, faults, o.Grace)
	seams, err := sys.readSeams(ctx)
	if err != nil {
		return nil, err
	}
	r.Seams = checkSeams(load, sys.recv, seams, st, faults, o.Grace, o.LivenessBound)
	r.Seams.Liveness = live.judge(faults, sys.endpointNames, load.acceptedAt())
	r.Answers = countAnswers(load.answers.All(), faults, o.Grace)
	for _, f := range faults {
		if f.Err != nil {
			r.FaultErrors = append(r.FaultErrors, fmt.Sprintf("%s %s: %v", f.Kind, strings.Join(f.Targets, ","), f.Err))
		}
		kind := strings.Split(f.Kind, "/")[0]
		a, ok1 := load.answers.FirstAcceptAfter(f.End)
		d, ok2 := sys.recv.FirstOKAfter(f.End)
		rec := time.Duration(math.MaxInt64)
		if ok1 && ok2 {
			rec = d.Sub(f.End)
			if a.After(d) {
				rec = a.Sub(f.End)
			}
		}
		if old, seen := r.Recovery[kind]; !seen || rec > old {
			r.Recovery[kind] = rec
		}
	}
	for _, p := range sys.procs {
		r.RSS = append(r.RSS, rssOf(p))
	}
	r.judge()
	return r, nil
}

// countAnswers sorts the tries by what came back and when.
func countAnswers(answers []apiAnswer, faults []faultRecord, grace time.Duration) answerCounts {
	c := answerCounts{Tries: len(answers), OtherStatus: make(map[int]int)}
	example := func(format string, args ...any) {
		if len(c.Examples) < 10 {
			c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
		}
	}
	for _, a := range answers {
		inOutage := duringFault(a.at, faults, grace)
		switch {
		case a.status/100 == 2:
			c.Accepted++
			continue
		case a.status == 503 && a.retryAfter:
			c.Unavailable++
		case a.status == 503:
			c.UnavailableNoRetry++
			example("%s %s: 503 without Retry-After (%s)", a.at.UTC().Format("15:04:05.000"), a.serve, a.requestID)
		case a.status == 409 && a.retryAfter:
			c.InProgress++
			continue
		case a.status == 429 && a.retryAfter:
			c.RateLimited++
			continue
		case a.status == 0 && isTimeout(a.failure):
			c.Timeouts++
		case a.status == 0:
			c.NoAnswer++
		default:
			c.OtherStatus[a.status]++
			example("%s %s: answered %d (%s)", a.at.UTC().Format("15:04:05.000"), a.serve, a.status, a.requestID)
			continue
		}
		if !inOutage {
			c.OutsideOutage++
			example("%s %s: %d %s outside every fault", a.at.UTC().Format("15:04:05.000"), a.serve, a.status, a.failure)
		}
	}
	return c
}

func isTimeout(failure string) bool {
	return strings.Contains(failure, "deadline exceeded") || strings.Contains(failure, "timeout")
}

// rssWarmUp is the shortest warm-up an incarnation's samples skip: a
// process just started under load grows to its working set (pools,
// caches, the heap's first GC cycles) for its first several seconds, and a
// worker restarted in the middle of a 60 s soak lives only ~40 s of it.
const rssWarmUp = 20 * time.Second

// rssJudgedSpan is the shortest window past warm-up whose growth is
// judged. Over less, a process still holding what a fault left it (held
// work, a pool grown while a link was slow; Go returns freed pages to the
// OS over minutes) cannot be told from a leak: the 60 s smoke soaks report
// their figures, the long soak (make chaos) judges them.
const rssJudgedSpan = 2 * time.Minute

// rssOf summarises a slot's samples: its longest-lived incarnation, past
// its warm-up (its first fifth, and at least rssWarmUp), first third
// against last third.
func rssOf(p *chaosProc) rssLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := rssLine{Name: p.Name, Incarnations: p.incarnation, Flat: true}
	by := make(map[int][]rssSample)
	for _, s := range p.rss {
		by[s.incarnation] = append(by[s.incarnation], s)
		line.Highest = max(line.Highest, s.bytes)
	}
	var longest []rssSample
	for _, v := range by {
		if len(v) > len(longest) {
			longest = v
		}
	}
	longest = pastWarmUp(longest)
	if len(longest) < 6 {
		return line
	}
	line.Judged = longest[len(longest)-1].at.Sub(longest[0].at) >= rssJudgedSpan
	bytes := make([]int64, len(longest))
	for i, s := range longest {
		bytes[i] = s.bytes
	}
	third := len(bytes) / 3
	line.Early, line.Late = medianBytes(bytes[:third]), medianBytes(bytes[len(bytes)-third:])
	// Flat: grew by under half, or under 30 MB.
	line.Flat = !line.Judged || float64(line.Late) < 1.5*float64(line.Early) || line.Late-line.Early < 30<<20
	return line
}

// pastWarmUp drops an incarnation's samples (in time order) from its first
// fifth and its first rssWarmUp, whichever is longer.
func pastWarmUp(v []rssSample) []rssSample {
	if len(v) == 0 {
		return v
	}
	start := v[0].at
	v = v[len(v)/5:]
	for len(v) > 0 && v[0].at.Sub(start) < rssWarmUp {
		v = v[1:]
	}
	return v
}

func medianBytes(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// judge lists every way the ledger does not hold.
func (r *chaosReport) judge() {
	l, a := r.Ledger, r.Answers
	fail := func(cond bool, format string, args ...any) {
		if cond {
			r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
		}
	}
	fail(!r.Drained, "the backlog did not drain within %s of the last fault", r.Opts.DrainBound)
	fail(l.EventsMissing > 0, "%d accepted events are not in PostgreSQL", l.EventsMissing)
	fail(l.Lost > 0, "%d deliveries lost (no delivery for an endpoint the event matched)", l.Lost)
	fail(l.SucceededUnseen > 0, "%d deliveries succeeded without the endpoint ever answering 2xx", l.SucceededUnseen)
	fail(l.DeadUnexplained > 0, "%d dead letters for no reason the endpoint gave", l.DeadUnexplained)
	fail(l.NotFinished > 0, "%d deliveries still waiting after the drain", l.NotFinished)
	fail(l.Misrouted > 0, "%d deliveries to endpoints the event did not match", l.Misrouted)
	fail(l.KeysMismatched > 0, "%d Idempotency-Keys answered with two sets of event ids", l.KeysMismatched)
	fail(l.EventsUnknown > 0, "%d events in PostgreSQL that no send got back (a key accepted twice)", l.EventsUnknown)
	fail(l.SendsUnresolved > 0, "%d sends never got through, even after the faults", l.SendsUnresolved)
	fail(l.Duplicates > l.DuplicatesExplained, "%d duplicate deliveries outside every fault",
		l.Duplicates-l.DuplicatesExplained)
	l.Outbox.failures(fail)
	l.Bulk.failures(fail)
	fail(a.UnavailableNoRetry > 0, "%d answers 503 without Retry-After", a.UnavailableNoRetry)
	fail(len(a.OtherStatus) > 0, "answers other than 2xx, 409/429/503 with Retry-After: %v", a.OtherStatus)
	fail(a.OutsideOutage > 0, "%d 503s or failed tries outside every fault", a.OutsideOutage)
	for _, s := range r.RSS {
		fail(!s.Flat, "%s's resident set grew from %s to %s", s.Name, mb(s.Early), mb(s.Late))
	}
	sm, lv := r.Seams, r.Seams.Liveness
	fail(sm.MostInFlight > 1, "the ordered endpoint held %d requests at once", sm.MostInFlight)
	fail(sm.OutOfOrder > 0, "%d requests to the ordered endpoint came after a later event's", sm.OutOfOrder)
	fail(sm.NumberedAgainst > 0, "%d pairs of ordered events numbered against the order the API accepted them", sm.NumberedAgainst)
	fail(sm.Openings == 0, "the flapping endpoint's circuit never opened (no circuit_opened event)")
	fail(sm.ProbesLate > 0, "%d openings of a circuit whose first probe came more than %s after its probe_at, outside faults",
		sm.ProbesLate, r.Opts.LivenessBound)
	fail(sm.FlappingStranded > 0, "%d events for the flapping endpoint neither delivered nor dead-lettered", sm.FlappingStranded)
	fail(sm.OpsMissing > 0, "%d operational events never reached the ops endpoint", sm.OpsMissing)
	fail(sm.OpsUnknown > 0, "%d event ids at the ops endpoint that are no operational event", sm.OpsUnknown)
	fail(sm.OpsDuplicates > 0, "%d operational events reached the ops endpoint again outside every fault", sm.OpsDuplicates)
	fail(sm.HistoryBroken > 0, "%d breaks in the circuits' history of operational events", sm.HistoryBroken)
	fail(sm.DeadLettersUntold > 0, "%d dead letters with no webhookd.delivery.dead_lettered event", sm.DeadLettersUntold)
	fail(sm.DeadLettersTwice > 0, "%d dead letters told more than once", sm.DeadLettersTwice)
	fail(lv.Overdue > 0, "%d deliveries waited more than %s past their time outside faults (worst %s: %s)",
		lv.Overdue, lv.Bound, lv.Worst.Round(100*time.Millisecond), lv.WorstWhat)
	fail(lv.Samples == 0, "liveness: PostgreSQL was never sampled")
	fail(len(r.FaultErrors) > 0, "faults that could not be injected or undone: %s", strings.Join(r.FaultErrors, "; "))
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }

// Write renders the report as Markdown.
func (r *chaosReport) Write(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# RELIABILITY: the chaos soak")
	p("")
	p("Written by `make chaos` (`bin/webhookd-bench chaos`): 2 `webhookd serve` and 2 `webhookd worker` processes on one "+
		"throwaway PostgreSQL server and one redis-server, each process reaching both through a toxiproxy proxy of its own; "+
		"senders on the Go client (`client/`) over both serve processes (single events, batches of 2–10, 12%% repeats of an "+
		"earlier send with its Idempotency-Key); endpoints answering at once, in 200 ms, flapping (500 for 4 s in 8, its circuit "+
		"opening and closing), 429 with `Retry-After: 1` to a third, hanging (2 events in 1,000), 410 from %s on, ordered "+
		"(`ordering: fifo`, 40 events in 1,000) and ops (webhookd's operational events); beside them a service committing "+
		"outbox rows (`client.Outbox`) in its own transactions on a database of the same server, one transaction in six "+
		"rolled back, which the workers move through their own proxies, and a bulk job (`client.Bulk`, 20–200 NDJSON lines) "+
		"every 5–12 s; faults on a seeded schedule, among "+
		"them a heartbeat stall (seconds of latency on one worker's PostgreSQL link); PostgreSQL sampled each second for "+
		"deliveries waiting past their time; then the ledger.", r.Opts.Duration*2/5)
	p("")
	verdict := "**the ledger holds**"
	if len(r.Failures) > 0 {
		verdict = "**the ledger does NOT hold**"
	}
	p("| | |")
	p("|---|---|")
	p("| verdict | %s |", verdict)
	p("| date | %s |", r.Date.Format(time.RFC3339))
	p("| binary soaked | %s |", r.Binary)
	p("| tree at writing | %s |", r.Commit)
	p("| machine | %s |", r.Machine)
	p("| PostgreSQL | %s |", r.Postgres)
	p("| seed | %d |", r.Opts.Seed)
	p("| load and faults | %s at %d events/s from %d senders, a fault every %s on average |", r.Ran.Round(time.Second),
		r.Opts.Rate, r.Opts.Senders, r.Opts.FaultGap)
	p("| retry schedule | %s (WEBHOOKD_RETRY_SCHEDULE); response timeout 3s, request timeout 10s |", r.Opts.RetrySchedule)
	p("| drain after the last fault | %s (bound %s), %s |", r.DrainTook.Round(time.Second), r.Opts.DrainBound,
		map[bool]string{true: "nothing left waiting", false: "NOT drained"}[r.Drained])
	p("| command | `%s` |", r.Command)
	p("")
	if len(r.Failures) > 0 {
		p("## What failed")
		p("")
		for _, f := range r.Failures {
			p("- %s", f)
		}
		examples := append(slices.Clone(r.Ledger.Examples), r.Answers.Examples...)
		examples = append(append(examples, r.Seams.Examples...), r.Seams.Liveness.Examples...)
		for _, e := range examples {
			p("  - e.g. %s", e)
		}
		p("")
	}
	if r.Stuck != nil {
		r.Stuck.write(p)
	}
	r.writeFaults(p)
	r.writeLedger(p)
	r.writeSources(p)
	r.writeSeams(p)
	p("## Resident set per process")
	p("")
	p("The longest-lived incarnation of each slot, sampled every 2 s, after its warm-up (its first fifth, at least %s): "+
		"median of the first third against the last third. Flat: grew by under half, or under 30 MB; judged only "+
		"over a window of %s or more.", rssWarmUp, rssJudgedSpan)
	p("")
	p("| process | incarnations | early | late | highest | flat |")
	p("|---|---:|---:|---:|---:|---|")
	for _, s := range r.RSS {
		p("| %s | %d | %s | %s | %s | %v |", s.Name, s.Incarnations, mb(s.Early), mb(s.Late), mb(s.Highest), s.verdict())
	}
	p("")
	p("## Reproduce")
	p("")
	p("```")
	p("make build bench-tool")
	p("bin/webhookd-bench chaos -seed %d -duration %s -rate %d -senders %d -fault-gap %s -out RELIABILITY.md",
		r.Opts.Seed, r.Opts.Duration, r.Opts.Rate, r.Opts.Senders, r.Opts.FaultGap)
	p("```")
	p("")
	p("The seed fixes the schedule of faults and the choices of the senders; the timing of a loaded machine does not repeat exactly.")
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *chaosReport) writeFaults(p func(string, ...any)) {
	count := make(map[string]int)
	for _, f := range r.Faults {
		count[strings.Split(f.Kind, "/")[0]]++
	}
	kinds := make([]string, 0, len(count))
	for k := range count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	p("## Faults injected")
	p("")
	p("Recovery: from the moment a fault was undone (the process ready again, the server started, the toxic removed) " +
		"until the API next accepted an event and an endpoint next answered a delivery 2xx; the longest of each kind. " +
		"Faults overlap, so a recovery may include another fault's.")
	p("")
	p("| fault | injected | longest recovery |")
	p("|---|---:|---:|")
	total := 0
	for _, k := range kinds {
		rec := "never (no later accept and delivery)"
		if d := r.Recovery[k]; d != time.Duration(math.MaxInt64) {
			rec = fmt.Sprintf("%.1f s", d.Seconds())
		}
		p("| %s | %d | %s |", k, count[k], rec)
		total += count[k]
	}
	p("| **all** | **%d** | |", total)
	p("")
	p("<details><summary>the schedule as it ran (UTC clock: injected-undone)</summary>")
	p("")
	p("```")
	for _, f := range r.Faults {
		p("%s  %s-%s%s", f.plannedFault, f.Start.UTC().Format("15:04:05.0"), f.End.UTC().Format("15:04:05.0"), errSuffix(f.Err))
	}
	p("```")
	p("</details>")
	p("")
}

func (r *chaosReport) writeLedger(p func(string, ...any)) {
	l, a := r.Ledger, r.Answers
	p("## The ledger")
	p("")
	p("| | |")
	p("|---|---:|")
	p("| sends (Idempotency-Keys) | %d |", l.Sends)
	p("| … repeated with the same key, same ids back | %d |", l.SendsRepeated)
	p("| … answered with other ids on a repeat | %d |", l.KeysMismatched)
	p("| … got through only when repeated after the faults | %d |", r.Resolved)
	p("| … never got through | %d |", l.SendsUnresolved)
	p("| events accepted (2xx) by the event routes | %d |", l.EventsSent)
	p("| events in PostgreSQL (outbox and bulk ones included) | %d |", l.EventsInDB)
	p("| … no send got their id (a key accepted twice) | %d |", l.EventsUnknown)
	p("| … accepted but missing | %d |", l.EventsMissing)
	p("| deliveries due (event × matching endpoint) | %d |", l.Deliveries)
	p("| delivered (succeeded, and the endpoint answered 2xx) | %d |", l.Delivered)
	for _, k := range sortedKeys(l.DeadLetters) {
		p("| dead letters %s | %d |", k, l.DeadLetters[k])
	}
	p("| … of them held unsent by an open circuit past their window, the endpoint refusing within %s before | %d |",
		circuitWord, l.DeadHeldByCircuit)
	p("| not routed: the 410 endpoint was disabled by then | %d |", l.NotRoutedGone)
	p("| dead letters for no reason the endpoint gave | %d |", l.DeadUnexplained)
	p("| **lost** | **%d** |", l.Lost+l.EventsMissing+l.SucceededUnseen)
	p("| still waiting after the drain | %d |", l.NotFinished)
	p("| duplicate deliveries (a request after the endpoint had answered 2xx) | %d |", l.Duplicates)
	p("| … explained by a fault (answered within 3 s before one to %s after it) | %d |", r.Opts.Grace, l.DuplicatesExplained)
	for _, k := range sortedKeys(l.DuplicatesBy) {
		p("| … at %s | %d |", k, l.DuplicatesBy[k])
	}
	p("")
	p("API tries (each HTTP request the client made, retries included):")
	p("")
	p("| | |")
	p("|---|---:|")
	p("| tries | %d |", a.Tries)
	p("| 2xx | %d |", a.Accepted)
	p("| 503 with Retry-After | %d |", a.Unavailable)
	p("| 503 without Retry-After | %d |", a.UnavailableNoRetry)
	p("| 409 idempotency_key_in_progress | %d |", a.InProgress)
	p("| 429 | %d |", a.RateLimited)
	p("| client-visible timeouts | %d |", a.Timeouts)
	p("| no answer (refused, reset) | %d |", a.NoAnswer)
	p("| any other status | %v |", a.OtherStatus)
	p("| 503s, timeouts and failures outside every fault (+%s) | %d |", r.Opts.Grace, a.OutsideOutage)
	p("")
}

func (r *chaosReport) writeSources(p func(string, ...any)) {
	o, b := r.Ledger.Outbox, r.Ledger.Bulk
	p("## The outbox and bulk jobs")
	p("")
	p("Each outbox row and each bulk line carries a marker of its own in its data (every other bulk line's is its external_id too); " +
		"the ledger counts webhookd's events by marker. An outbox transaction whose COMMIT got no answer (a PostgreSQL " +
		"restart) is decided by the service's own table, written in the same transaction.")
	p("")
	p("| | outbox rows | bulk lines |")
	p("|---|---:|---:|")
	p("| sent | %d (in %d transactions) | %d (in %d requests, %d tries) |", o.Rows, o.Txs, b.Lines, b.Requests, b.Tries)
	p("| accepted: committed / answered 202 | %d (%d transactions) | %d (%d jobs) |", o.RowsCommitted, o.TxsCommitted,
		b.LinesOfAccepted, b.Accepted)
	p("| … decided at the end: COMMIT unanswered, committed / not | %d / %d | |", o.TxsMaybeCommitted, o.TxsMaybe-o.TxsMaybeCommitted)
	p("| … requests that got their 202 only when tried again after the faults | | %d |", r.Ledger.BulkResolved)
	p("| … requests repeated with their key: the same job back / another job | | %d / %d |", b.Repeats, b.KeysMismatched)
	p("| not accepted: transactions rolled back on purpose / failed before COMMIT; requests with no 202 | %d / %d | %d |",
		o.TxsRolledBack, o.TxsFailed, b.NotAccepted)
	p("| became one event each | %d | %d |", o.RowsMoved, b.LinesAccepted)
	p("| bulk jobs succeeded / still running / failed, canceled or missing / unknown | | %d / %d / %d / %d |",
		b.JobsSucceeded, b.JobsNotFinished, b.JobsOtherwise, b.JobsUnknown)
	p("| refused by webhookd | %d | %d |", o.RowsRefused, b.LinesRefused)
	p("| left in webhookd_outbox after the drain | %d | |", o.RowsLeft)
	p("| deliveries due / delivered / dead letters / not routed (410 endpoint disabled) | %d / %d / %d / %d | %d / %d / %d / %d |",
		o.Deliveries, o.Delivered, o.DeadLetters, o.NotRouted, b.Deliveries, b.Delivered, b.DeadLetters, b.NotRouted)
	p("| **lost** (accepted, no event; deliveries lost) | **%d; %d** | **%d; %d** |", o.RowsLost, o.DeliveriesLost,
		b.LinesLost, b.DeliveriesLost)
	p("| **doubled** (more than one event) | **%d** | **%d** |", o.RowsDoubled, b.LinesDoubled)
	p("| **not accepted, delivered anyway** (rolled back; no 202) | **%d** | **%d** |", o.RowsUncommittedDelivered, b.LinesUnaccepted)
	p("| outcomes the service's database contradicts | %d | |", o.CommittedMissing+o.RolledBackFound)
	p("")
}

func (r *chaosReport) writeSeams(p func(string, ...any)) {
	sm, lv := r.Seams, r.Seams.Liveness
	p("## The engine's seams")
	p("")
	p("The ordered endpoint (`ordering: fifo`, account.updated; 50 ms an answer, 500 to 1 in 8, 400 to 1 in 40), the " +
		"flapping endpoint's circuit (500 for 4 s in 8), the ops endpoint (subscribed to the webhookd.* types by name), " +
		"and every delivery's wait, sampled in PostgreSQL each second.")
	p("")
	p("| | |")
	p("|---|---:|")
	p("| ordered: events numbered / requests | %d / %d |", sm.OrderedEvents, sm.OrderedRequests)
	p("| … most requests in flight at once (at most 1) | %d |", sm.MostInFlight)
	p("| … requests for an event numbered before one already sent | %d |", sm.OutOfOrder)
	p("| … pairs numbered against the order the API accepted them | %d |", sm.NumberedAgainst)
	p("| … repeats of the event just sent (retries; duplicates after a fault) | %d |", sm.OrderedRetries)
	p("| … dead letters (each let the next go) | %d |", sm.OrderedDeadLetter)
	p("| flapping: circuit openings / closings (operational events) | %d / %d |", sm.Openings, sm.Closings)
	p("| … first probe within %s of probe_at, outside faults | %d |", r.Opts.LivenessBound, sm.ProbesOnTime)
	p("| … later | %d |", sm.ProbesLate)
	p("| … nothing left to probe | %d |", sm.ProbesUnneeded)
	p("| … latest first probe past probe_at, outside faults | %.1f s |", sm.WorstProbe.Seconds())
	p("| … events neither delivered nor dead-lettered | %d |", sm.FlappingStranded)
	for _, k := range sortedKeys(sm.OpsByType) {
		p("| operational events %s | %d |", k, sm.OpsByType[k])
	}
	p("| … circuit_opened received by the ops endpoint | %d |", sm.OpsCircuitReceived)
	p("| … never received | %d |", sm.OpsMissing)
	p("| … received and no operational event | %d |", sm.OpsUnknown)
	p("| … received again outside every fault | %d |", sm.OpsDuplicates)
	p("| … breaks in a circuit's opened/closed history | %d |", sm.HistoryBroken)
	p("| … dead letters of the senders' events never told / told twice | %d / %d |", sm.DeadLettersUntold, sm.DeadLettersTwice)
	p("| liveness: samples (failed) | %d (%d%s) |", lv.Samples, lv.Errors, map[bool]string{true: "", false: "; last: " + oneLine(lv.LastError)}[lv.LastError == ""])
	p("| … deliveries waiting more than %s past their time, outside faults | %d |", lv.Bound, lv.Overdue)
	for _, k := range sortedKeys(lv.OverdueByReason) {
		p("| … … waiting_reason %s | %d |", k, lv.OverdueByReason[k])
	}
	p("| … longest wait past its time outside faults | %.1f s |", lv.Worst.Seconds())
	p("| … longest wait past its time, faults included | %.1f s |", lv.WorstRaw.Seconds())
	p("| … longest a worker's heartbeat was seen stale | %.1f s |", lv.OldestBeat.Seconds())
	p("")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeChaosReport prints the report to stdout, and to path unless it is "-".
func writeChaosReport(r *chaosReport, path string) error {
	if err := r.Write(os.Stdout); err != nil || path == "-" {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := errors.Join(r.Write(f), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	progress("wrote %s", path)
	return nil
}
