package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// RelayWake is a delivery of a relay endpoint made due by WakeRelay.
type RelayWake struct {
	DeliveryID, EndpointID string
}

// relayWakeLimit bounds the deliveries one WakeRelay makes due: a listener
// wakes the relay again at each heartbeat, so a larger backlog follows in
// steps instead of one statement that locks it all.
const relayWakeLimit = 1000

// WakeRelay makes the deliveries of project's relay endpoints named url
// (relay://NAME) that wait because nobody listened (waiting_reason
// circuit_open on an endpoint whose circuit is closed) due now, and
// returns them: a `webhookd listen` is connected. Deliveries behind an
// open circuit are left to its probe; deliveries another caller is waking
// are skipped, not waited for.
func (db *DB) WakeRelay(ctx context.Context, project, url string) ([]RelayWake, error) {
	rows, err := db.pool.Query(ctx, `UPDATE deliveries d SET next_attempt_at = least(d.next_attempt_at, now()), waiting_reason = NULL
		FROM (SELECT w.id FROM endpoints p JOIN deliveries w ON w.endpoint_id = p.id
			WHERE p.project_id = $1 AND p.url = $2 AND p.circuit = 'closed' AND w.waiting_reason = 'circuit_open'
				AND w.status IN ('pending', 'retrying')
			ORDER BY w.next_attempt_at LIMIT $3 FOR UPDATE OF w SKIP LOCKED) x
		WHERE d.id = x.id
		RETURNING d.id, d.endpoint_id`, project, url, relayWakeLimit)
	if err != nil {
		return nil, fmt.Errorf("wake relay %s: %w", url, err)
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RelayWake, error) {
		var w RelayWake
		return w, r.Scan(&w.DeliveryID, &w.EndpointID)
	})
	if err != nil {
		return nil, fmt.Errorf("wake relay %s: %w", url, err)
	}
	return ws, nil
}

// isRelay is the SQL condition that endpoint p is a relay endpoint.
const isRelay = `p.url LIKE '` + webhookd.RelayScheme + `://%'`
