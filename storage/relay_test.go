package storage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestRelayDeliveriesWaitForAListener: a relay endpoint's delivery waits
// for a listener (circuit_open) though its circuit is closed, where an
// HTTP endpoint's wait for a closed circuit is refused; WakeRelay makes due
// the waiting deliveries of that project's relay of that name, and only
// those whose circuit is closed. The database refuses a relay URL that
// names no relay.
func TestRelayDeliveriesWaitForAListener(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx, s := context.Background(), db.Store()
	// delivery makes project name with one endpoint at url and returns its
	// project and the delivery of one event, leased by token tok.
	delivery := func(name, url string) (project, id string) {
		t.Helper()
		_, p, err := s.CreateAPIKey(ctx, name, storage.ProjectPlan{})
		if err != nil {
			t.Fatal(err)
		}
		project = p.ID
		if _, err := s.CreateEndpoint(ctx, project, storage.NewEndpoint{URL: url, Secret: "whsec_AAAA"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		evs, err := s.CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, time.Now(),
			func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		id = evs[0].Deliveries[0].ID
		if _, err := db.Pool().Exec(ctx, `UPDATE deliveries SET lease_owner = 'tok', lease_until = now() + interval '1 minute'
			WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		return project, id
	}
	state := func(id string) (reason *string, next time.Time) {
		t.Helper()
		if err := db.Pool().QueryRow(ctx, `SELECT waiting_reason, next_attempt_at FROM deliveries WHERE id = $1`, id).
			Scan(&reason, &next); err != nil {
			t.Fatal(err)
		}
		return reason, next
	}
	end := time.Now().Add(25 * time.Hour).UTC().Truncate(time.Millisecond)

	relayProject, relayed := delivery("relay", "relay://laptop")
	otherProject, other := delivery("other", "relay://laptop") // the same name in another project
	_, plain := delivery("plain", "https://example.com/hooks")
	for _, id := range []string{relayed, other} {
		if waits, err := db.ReleaseLease(ctx, id, "tok", webhookd.WaitingCircuitOpen, end); err != nil || !waits {
			t.Fatalf("relay delivery's wait for a listener: %v, %v; want it recorded", waits, err)
		}
		if reason, next := state(id); reason == nil || *reason != webhookd.WaitingCircuitOpen || !next.Equal(end) {
			t.Fatalf("relay delivery waits for %v until %v, want circuit_open until %v", reason, next, end)
		}
	}
	if waits, err := db.ReleaseLease(ctx, plain, "tok", webhookd.WaitingCircuitOpen, end); err != nil || waits {
		t.Fatalf("HTTP endpoint with a closed circuit: %v, %v; want its wait refused", waits, err)
	}

	woke, err := db.WakeRelay(ctx, relayProject, "relay://laptop")
	if err != nil || len(woke) != 1 || woke[0].DeliveryID != relayed {
		t.Fatalf("WakeRelay: %v, %v; want %s alone", woke, err, relayed)
	}
	if reason, next := state(relayed); reason != nil || next.After(time.Now()) {
		t.Fatalf("woken delivery waits for %v until %v, want due now", reason, next)
	}
	if reason, _ := state(other); reason == nil {
		t.Fatal("another project's relay of the same name was woken")
	}
	// Behind an open circuit, a relay's deliveries are the probe's.
	if _, err := db.Pool().Exec(ctx, `UPDATE endpoints SET circuit = 'open', probe_at = now() + interval '1 minute'
		WHERE project_id = $1`, otherProject); err != nil {
		t.Fatal(err)
	}
	if woke, err := db.WakeRelay(ctx, otherProject, "relay://laptop"); err != nil || len(woke) != 0 {
		t.Fatalf("WakeRelay behind an open circuit: %v, %v; want nothing", woke, err)
	}

	for _, url := range []string{"relay://", "relay://a b", "relay://laptop/x", "ftp://x"} {
		if _, err := s.CreateEndpoint(ctx, relayProject, storage.NewEndpoint{URL: url, Secret: "whsec_AAAA"}, time.Now()); err == nil {
			t.Errorf("the database took the endpoint URL %q", url)
		}
	}
}
