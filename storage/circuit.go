package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// CircuitConfig is the breaker's setting (SPEC §3 "Endpoint lifecycle").
type CircuitConfig struct {
	// After is how many consecutive failed attempts open an endpoint's
	// circuit; 0 turns the breaker off.
	After int
	// Probes are the waits before each probe of an open circuit; the
	// last one repeats.
	Probes []time.Duration
	// DisableAfter disables an endpoint that has had no successful
	// attempt for this long while its attempts failed; 0: never.
	DisableAfter time.Duration
}

// CircuitMinSpan is how long an endpoint must have been failing, besides
// the count, before its circuit opens: a burst of refusals from a receiver
// that is there but full (a limit that overshot its capacity answered 503
// a dozen times within a millisecond) is not an outage.
const CircuitMinSpan = time.Second

// CircuitOutcome is one recorded attempt as the breaker counts it.
type CircuitOutcome struct {
	EndpointID string
	OK         bool // 2xx; else a failure: 5xx, a timeout, a connect error
	// Probe: the attempt was the probe of the endpoint's circuit (it took
	// it with TakeProbe). Only a probe's failure moves the next probe
	// along: attempts already in flight when the circuit opened fail too,
	// and would otherwise push the first probe down the whole schedule.
	Probe bool
	At    time.Time
}

// CircuitChange is an endpoint whose circuit or status an outcome changed.
type CircuitChange struct {
	EndpointID, ProjectID string
	From, To              string     // circuit states
	Disabled              bool       // disabled now (disabled_reason failing)
	ProbeAt               *time.Time // the next probe, when To is open
	Failures              int
	// Deliveries are those of the operational events the change wrote
	// with it (circuit_opened, circuit_closed, disabled): to enqueue once
	// ApplyCircuit has returned.
	Deliveries []webhookd.ScheduledDelivery
}

// circuitState is an endpoint's breaker as ApplyCircuit reads and writes it.
type circuitState struct {
	id, project, status, circuit string
	failures, probes             int
	failingSince, probeAt        *time.Time
}

// ApplyCircuit counts outcomes towards each endpoint's breaker, in order
// (circuitState.count), and returns the endpoints whose circuit or status
// changed. It writes the operational events of the changes in the same
// transaction (circuitEvents), at the time of the endpoint's last outcome
// or just after the endpoint's last event, whichever is later (afterLast).
func (db *DB) ApplyCircuit(ctx context.Context, cfg CircuitConfig, outcomes []CircuitOutcome) ([]CircuitChange, error) {
	if len(outcomes) == 0 {
		return nil, nil
	}
	var changes []CircuitChange
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// One endpoint at a time, in id order (no deadlock between two
		// workers), each row locked while its outcomes apply.
		byEP := map[string][]CircuitOutcome{}
		var ids []string
		for _, o := range outcomes {
			if _, ok := byEP[o.EndpointID]; !ok {
				ids = append(ids, o.EndpointID)
			}
			byEP[o.EndpointID] = append(byEP[o.EndpointID], o)
		}
		states, err := lockCircuits(ctx, tx, ids)
		if err != nil {
			return err
		}
		var evs []operationalEvent
		var of []int // the change each event tells of
		for _, s := range states {
			was, disabled := s, false
			for _, o := range byEP[s.id] {
				disabled = s.count(cfg, o) || disabled
			}
			if s == was {
				continue
			}
			if err := writeCircuit(ctx, tx, s, disabled, was.circuit != webhookd.CircuitClosed); err != nil {
				return err
			}
			if s.circuit != was.circuit || disabled {
				c := CircuitChange{EndpointID: s.id, ProjectID: s.project, From: was.circuit, To: s.circuit,
					Disabled: disabled, ProbeAt: s.probeAt, Failures: s.failures}
				for _, ev := range circuitEvents(c, byEP[s.id][len(byEP[s.id])-1].At) {
					evs, of = append(evs, ev), append(of, len(changes))
				}
				changes = append(changes, c)
			}
		}
		if err := afterLast(ctx, tx, evs); err != nil {
			return err
		}
		ds, err := insertOperationalEvents(ctx, tx, evs)
		for i, d := range ds {
			changes[of[i]].Deliveries = append(changes[of[i]].Deliveries, d...)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("circuit: %w", err)
	}
	return changes, nil
}

// afterLast moves each event of evs to just after the last event about its
// endpoint (events_lifecycle_idx), if its time is not later already, so
// that an endpoint's events are in the order of its changes, which its row
// lock (lockCircuits) puts in the order of their commits. An event's time
// is the endpoint's last outcome's, and a worker's outcomes can be counted
// after another worker's later ones (a success in flight as another's
// failures opened the circuit, counted once its worker's link to
// PostgreSQL came back): dated by its outcome, its circuit_closed would
// sort before the circuit_opened it followed, and the endpoint's history,
// read in id order as the API lists it, would say closed, closed while the
// circuit is closed and its last event says opened.
func afterLast(ctx context.Context, tx pgx.Tx, evs []operationalEvent) error {
	if len(evs) == 0 {
		return nil
	}
	about := make([]string, len(evs))
	for i, ev := range evs {
		about[i] = ev.about
	}
	rows, err := tx.Query(ctx, `SELECT a.ep, (SELECT e.created_at FROM events e
			WHERE (e.data->>'endpoint_id') = a.ep AND e.type LIKE 'webhookd.endpoint.%'
			ORDER BY e.id DESC LIMIT 1)
		FROM unnest($1::text[]) AS a(ep)`, about)
	if err != nil {
		return fmt.Errorf("last events: %w", err)
	}
	last := map[string]time.Time{}
	var (
		ep string
		at *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&ep, &at}, func() error {
		if at != nil {
			last[ep] = *at
		}
		return nil
	}); err != nil {
		return fmt.Errorf("last events: %w", err)
	}
	for i := range evs {
		// An id's time is in milliseconds: a millisecond on, it sorts after.
		if l, ok := last[evs[i].about]; ok && evs[i].at.Before(l.Add(time.Millisecond)) {
			evs[i].at = l.Add(time.Millisecond)
		}
	}
	return nil
}

// circuitEvents are the operational events that tell of c, made at at.
func circuitEvents(c CircuitChange, at time.Time) []operationalEvent {
	var evs []operationalEvent
	add := func(typ string, data map[string]any) {
		evs = append(evs, operationalEvent{projectID: c.ProjectID, about: c.EndpointID, typ: typ, data: data, at: at})
	}
	switch {
	case c.To == webhookd.CircuitClosed && c.From != webhookd.CircuitClosed:
		add(webhookd.EventCircuitClosed, map[string]any{"endpoint_id": c.EndpointID})
	case c.To == webhookd.CircuitOpen && c.From == webhookd.CircuitClosed:
		add(webhookd.EventCircuitOpened, map[string]any{"endpoint_id": c.EndpointID, "consecutive_failures": c.Failures,
			"next_probe_at": c.ProbeAt})
	}
	if c.Disabled {
		add(webhookd.EventEndpointDisabled, map[string]any{"endpoint_id": c.EndpointID, "disabled_reason": webhookd.DisabledFailing})
	}
	return evs
}

// lockCircuits reads the breakers of the endpoints ids, locked, in id order.
func lockCircuits(ctx context.Context, tx pgx.Tx, ids []string) ([]circuitState, error) {
	rows, err := tx.Query(ctx, `SELECT id, project_id, status, circuit, failures, failing_since, probes, probe_at
		FROM endpoints WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, err
	}
	var states []circuitState
	var st circuitState
	_, err = pgx.ForEachRow(rows, []any{&st.id, &st.project, &st.status, &st.circuit, &st.failures,
		&st.failingSince, &st.probes, &st.probeAt}, func() error { states = append(states, st); return nil })
	return states, err
}

// count applies one outcome (SPEC §3 "Endpoint lifecycle"): a success
// closes the circuit and ends the failing spell; a failure of a closed
// circuit adds to the consecutive failures and opens it at cfg.After once
// the spell has lasted CircuitMinSpan; a failed probe reopens it with the
// next wait of cfg.Probes; any other failure of an open circuit (an
// attempt in flight when it opened) only adds to the count. A failing
// spell of cfg.DisableAfter disables the endpoint (failing): count
// returns true when this outcome did.
func (s *circuitState) count(cfg CircuitConfig, o CircuitOutcome) (disabled bool) {
	switch {
	case o.OK:
		s.failures, s.failingSince, s.circuit, s.probes, s.probeAt = 0, nil, webhookd.CircuitClosed, 0, nil
	case s.circuit == webhookd.CircuitClosed:
		s.failures++
		if s.failingSince == nil {
			at := o.At
			s.failingSince = &at
		}
		if cfg.After > 0 && s.failures >= cfg.After && o.At.Sub(*s.failingSince) >= CircuitMinSpan {
			at := o.At.Add(ProbeWait(cfg.Probes, 0))
			s.circuit, s.probes, s.probeAt = webhookd.CircuitOpen, 0, &at
		}
	case o.Probe:
		s.failures++
		s.probes++
		at := o.At.Add(ProbeWait(cfg.Probes, s.probes))
		s.circuit, s.probeAt = webhookd.CircuitOpen, &at
	default:
		s.failures++
	}
	if !o.OK && cfg.DisableAfter > 0 && s.status == webhookd.EndpointActive && s.failingSince != nil &&
		o.At.Sub(*s.failingSince) >= cfg.DisableAfter {
		s.status = webhookd.EndpointDisabled
		return true
	}
	return false
}

// writeCircuit stores s; disabled: the outcomes disabled the endpoint.
// The probe's worker is kept only while its probe is in flight (probing).
// Only the disabling bumps the version: the circuit is the endpoint's
// health, not its settings, and a client's If-Match PATCH of an endpoint
// that flaps must not fail for it.
func writeCircuit(ctx context.Context, tx pgx.Tx, s circuitState, disabled, wasOpen bool) error {
	_, err := tx.Exec(ctx, `UPDATE endpoints SET circuit = $2, failures = $3, failing_since = $4, probes = $5,
			probe_at = $6, probe_worker = CASE WHEN $2 = 'probing' THEN probe_worker END,
			circuit_opened_at = CASE WHEN $2 = 'closed' THEN NULL
				WHEN circuit = 'closed' THEN now() ELSE circuit_opened_at END,
			status = $7, disabled_reason = CASE WHEN $8 THEN 'failing' ELSE disabled_reason END,
			version = version + CASE WHEN $8 THEN 1 ELSE 0 END
		WHERE id = $1`, s.id, s.circuit, s.failures, s.failingSince, s.probes, s.probeAt, s.status, disabled)
	if err != nil || !wasOpen || s.circuit != webhookd.CircuitClosed {
		return err
	}
	// Closed: the deliveries that waited for its probe now wait only for
	// room at the endpoint, in the transaction that closed it; the
	// dispatcher wakes as many as the endpoint has room for, and each slot
	// that frees the next (a backlog does not rush at a recovering
	// receiver all at once).
	_, err = tx.Exec(ctx, `UPDATE deliveries SET waiting_reason = 'endpoint_busy', next_attempt_at = now() + $2::interval
		WHERE endpoint_id = $1 AND waiting_reason = 'circuit_open' AND status IN ('pending', 'retrying')`, s.id, HoldFor)
	return err
}

// ProbeWait is the wait before probe n (0: the first) of an open circuit.
func ProbeWait(probes []time.Duration, n int) time.Duration {
	if len(probes) == 0 {
		return 30 * time.Second
	}
	return probes[min(n, len(probes)-1)]
}

// TakeProbe makes the caller, an attempt of worker, the probe of ep's open
// circuit if its probe is due at now: the circuit goes to probing until
// until (should the probe never be counted, another may go then, or as
// soon as worker is found dead: VoidDeadLeases). False: the probe is not
// due, or another attempt took it.
func (db *DB) TakeProbe(ctx context.Context, ep string, now, until time.Time, worker string) (bool, error) {
	tag, err := db.pool.Exec(ctx, `UPDATE endpoints SET circuit = 'probing', probe_at = $3, probe_worker = NULLIF($4, '')
		WHERE id = $1 AND circuit <> 'closed' AND probe_at <= $2`, ep, now, until, worker)
	if err != nil {
		return false, fmt.Errorf("take probe: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
