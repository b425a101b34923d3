package dispatcher

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestHolderKeepsAnEndpointWhoseWakeFailed: a pass whose wake could not
// reach PostgreSQL keeps the endpoint, and the heartbeat still says this
// worker holds its deliveries. Forgotten, they would wait an hour for a
// freed slot that wakes nothing, or for the reconciler.
func TestHolderKeepsAnEndpointWhoseWakeFailed(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	h := newHolder(db, nil, newGate(10, time.Second), webhookd.SystemClock{}, slog.New(slog.DiscardHandler), nil)
	h.remember("ep_x")
	db.Close() // PostgreSQL out of reach
	h.pass(context.Background())
	loads := map[string]storage.EndpointLoad{}
	h.holding(loads)
	if loads["ep_x"].Holding != 1 {
		t.Fatal("a pass whose wake failed forgot the endpoint")
	}
}
