package dispatcher_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestRetentionOneProcessAtATime: while another process makes a retention
// pass, this one skips its own; once that pass is over, it makes one.
func TestRetentionOneProcessAtATime(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	ctx := context.Background()
	_, p, err := db.Store().CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	// An old event for no endpoint: nothing holds it, the purge takes it.
	if _, err := db.Store().CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}},
		time.Now().Add(-30*24*time.Hour), func(int) string { return "" }); err != nil {
		t.Fatal(err)
	}
	r := &dispatcher.Retention{DB: db, Keep: 14 * 24 * time.Hour, Batch: 10, Clock: webhookd.SystemClock{}}

	holding, release, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := db.AsLeader(ctx, "retention", func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
		finished <- err
	}()
	<-holding
	if ran, purged, err := r.RunOnce(ctx); err != nil || ran || purged != (storage.Purged{}) {
		t.Fatalf("while another pass runs: ran %v, purged %+v, %v; want it skipped", ran, purged, err)
	}
	close(release)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if ran, purged, err := r.RunOnce(ctx); err != nil || !ran || purged.Events != 1 {
		t.Fatalf("alone: ran %v, purged %+v, %v; want the old event purged", ran, purged, err)
	}
}
