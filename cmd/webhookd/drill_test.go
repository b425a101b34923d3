package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestMain lets a test start this binary as `webhookd` itself: with
// WEBHOOKD_TEST_MAIN=1 it runs main() instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("WEBHOOKD_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestWorkerKilledMidAttemptLosesNothing kills a worker process with
// SIGKILL while a receiver holds its request open, then starts another:
// the event is delivered (twice: at least once, never zero). asynq gives a
// killed worker's task back once its lease is a minute stale, so this drill
// takes about a minute.
func TestWorkerKilledMidAttemptLosesNothing(t *testing.T) {
	t.Parallel()
	name, dbURL := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, p, err := db.Store().CreateAPIKey(ctx, "drill", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var ids []string
	inFlight := make(chan struct{}, 1)
	release := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		first := len(ids) == 1
		mu.Unlock()
		if first {
			inFlight <- struct{}{}
			<-release // held open until the worker is dead
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(rc.Close)
	t.Cleanup(func() { close(release) })
	if _, err := db.Store().CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: rc.URL, Secret: "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ="}, time.Now()); err != nil {
		t.Fatal(err)
	}
	evs, err := db.Store().CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	deliveryID := evs[0].Deliveries[0].ID

	worker := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "worker")
		cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1", "WEBHOOKD_DATABASE_URL="+dbURL, "WEBHOOKD_REDIS_URL="+redisURL,
			"WEBHOOKD_ALLOW_PRIVATE_NETWORKS=true", "WEBHOOKD_RETRY_SCHEDULE=1s")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	first := worker() // its reconciler enqueues the due delivery
	select {
	case <-inFlight:
	case <-time.After(30 * time.Second):
		t.Fatal("the first worker never sent the delivery")
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	killedAt := time.Now()

	d, err := db.Store().GetDelivery(ctx, p.ID, deliveryID)
	if err != nil || d.Status != webhookd.DeliveryPending || d.AttemptsCount != 0 {
		t.Fatalf("after the kill: %+v (%v); the unfinished attempt must leave no trace", d, err)
	}
	// The Redis task is still leased to the dead worker; a new worker's
	// recoverer takes it back once the lease is stale.
	worker()
	deadline := killedAt.Add(150 * time.Second)
	for {
		d, err = db.Store().GetDelivery(ctx, p.ID, deliveryID)
		if err == nil && d.Status == webhookd.DeliverySucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s not delivered within 150s of the kill: %+v (%v)", deliveryID, d, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < 2 || ids[0] != ids[1] || ids[0] != evs[0].ID {
		t.Fatalf("receiver saw %v; want the event again after the kill", ids)
	}
}
