package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

func TestDeliversSignedEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc := newReceiver(t, status(204))
	ep := e.endpoint(rc.URL+"/hook", nil)
	id := e.publish("order.created", 1)[0]
	d := e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)

	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	r := got[0]
	wh, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Fatalf("the official Standard Webhooks verifier rejects the delivery: %v", err)
	}
	var body struct {
		ID, Type, Timestamp string
		Data                json.RawMessage
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, body.Timestamp); err != nil || body.ID != d.EventID || body.Type != "order.created" || string(body.Data) != `{"n":1}` {
		t.Fatalf("body %s", r.body)
	}
	want := map[string]string{"webhook-id": d.EventID, "X-Event-Id": d.EventID, "X-Event-Type": "order.created",
		"X-Delivery-Attempt": "1", "Content-Type": "application/json", "User-Agent": "webhookd/" + webhookd.Version}
	for k, v := range want {
		if r.header.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, r.header.Get(k), v)
		}
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute {
		t.Errorf("webhook-timestamp %q", r.header.Get("webhook-timestamp"))
	}
	if !strings.HasPrefix(r.header.Get("X-Request-Id"), "req_") {
		t.Errorf("X-Request-Id %q", r.header.Get("X-Request-Id"))
	}
	if d.AttemptsCount != 1 || len(d.Attempts) != 1 || d.NextAttemptAt != nil || deref(d.LastStatusCode) != 204 {
		t.Fatalf("delivery %+v", d)
	}
	a := d.Attempts[0]
	if a.Number != 1 || a.RequestID != r.header.Get("X-Request-Id") || a.URL != rc.URL+"/hook" || a.Trigger != "auto" ||
		deref(a.StatusCode) != 204 || a.Error != nil || a.RequestHeaders["Webhook-Id"] != d.EventID || a.StartedAt.IsZero() {
		t.Fatalf("attempt %+v", a)
	}
}

func TestRetriesOnScheduleThenSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{time.Second, 2 * time.Second, time.Hour, time.Hour}
	})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 2 {
			w.WriteHeader(500)
			w.Write([]byte("boom"))
			return
		}
		w.WriteHeader(200)
	})
	e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	d := e.waitStatus(id, webhookd.DeliverySucceeded, 15*time.Second)
	got := rc.requests()
	if len(got) != 3 || d.AttemptsCount != 3 {
		t.Fatalf("%d requests, %d attempts; want 3", len(got), d.AttemptsCount)
	}
	for i, r := range got {
		if r.header.Get("X-Delivery-Attempt") != strconv.Itoa(i+1) {
			t.Errorf("request %d: X-Delivery-Attempt %q", i, r.header.Get("X-Delivery-Attempt"))
		}
		if i > 0 && r.header.Get("webhook-id") != got[0].header.Get("webhook-id") {
			t.Error("webhook-id changed between attempts")
		}
	}
	// Never early, and not grossly late. How late an attempt runs is a
	// speed property the load tool measures (steady, scheduled), not a
	// test on a machine others load too.
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		gap := got[i+1].at.Sub(got[i].at)
		if gap < want || gap > want+maxLate {
			t.Errorf("gap before attempt %d: %v, want %v to %v", i+2, gap, want, want+maxLate)
		}
	}
	if d.Attempts[0].ResponseBody != "boom" || deref(d.Attempts[0].StatusCode) != 500 {
		t.Errorf("first attempt %+v", d.Attempts[0])
	}
}

// maxLate is how late a retry may come in these tests: far above the
// second it takes on a quiet machine, far below the next schedule step.
const maxLate = 5 * time.Second

func TestExhaustedThenDeadLetterThenSilence(t *testing.T) {
	t.Parallel()
	schedule := dispatcher.Schedule{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
	e := newEnv(t, func(c *dispatcher.Config) { c.Schedule = schedule })
	rc := newReceiver(t, status(500))
	e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	d := e.waitStatus(id, webhookd.DeliveryDeadLetter, 30*time.Second)
	got := rc.requests()
	if d.AttemptsCount != 5 || len(got) != 5 {
		t.Fatalf("%d attempts, %d requests; want 5", d.AttemptsCount, len(got))
	}
	// 1s,2s,3s,4s: never early, and not grossly late.
	for i, want := range schedule {
		if gap := got[i+1].at.Sub(got[i].at); gap < want || gap > want+maxLate {
			t.Errorf("gap before attempt %d: %v, want %v to %v", i+2, gap, want, want+maxLate)
		}
	}
	if n := e.count(`SELECT count(*) FROM dead_letters WHERE delivery_id = $1 AND reason = 'exhausted' AND last_status_code = 500`, id); n != 1 {
		t.Fatalf("%d exhausted dead letters", n)
	}
	// Silence: the reconciler finds nothing due, and asynq holds no task for it.
	rec := &dispatcher.Reconciler{DB: e.db, Queue: e.worker.Queue, Clock: webhookd.SystemClock{}}
	if _, n, err := rec.RunOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("reconciler found %d due (%v)", n, err)
	}
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	waitFor(t, 5*time.Second, "asynq letting the task go", func() bool { // its handler returned; asynq marks it done just after
		_, err := insp.GetTaskInfo(dispatcher.DefaultQueue, id)
		return err != nil
	})
	if len(rc.requests()) != 5 {
		t.Fatal("the receiver heard more after the dead letter")
	}
}

func TestRetryAfterIsObeyed(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"seconds", "http-date"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *dispatcher.Config) { c.Schedule = dispatcher.Schedule{time.Hour, time.Hour} })
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					v := "2"
					if form == "http-date" {
						v = time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
					}
					w.Header().Set("Retry-After", v)
					w.WriteHeader(429)
					return
				}
				w.WriteHeader(200)
			})
			e.endpoint(rc.URL, nil)
			id := e.publish("a", 1)[0]
			d := e.waitStatus(id, webhookd.DeliverySucceeded, 15*time.Second)
			got := rc.requests()
			gap := got[1].at.Sub(got[0].at)
			if gap < 2*time.Second || gap > 5*time.Second {
				t.Fatalf("second attempt %v after a 429 with Retry-After (%s); want 2s..5s, never the 1h schedule", gap, form)
			}
			if d.AttemptsCount != 2 || deref(d.Attempts[0].StatusCode) != 429 {
				t.Fatalf("attempts %+v", d.Attempts)
			}
		})
	}
}

func TestTimeoutsRetry(t *testing.T) {
	t.Parallel()
	t.Run("response timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(c *dispatcher.Config) {
			c.HTTP.ResponseTimeout = 300 * time.Millisecond
			c.Schedule = dispatcher.Schedule{time.Hour}
		})
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		e.endpoint(rc.URL, nil)
		id := e.publish("a", 1)[0]
		d := e.waitStatus(id, webhookd.DeliveryRetrying, 10*time.Second)
		a := d.Attempts[0]
		if a.StatusCode != nil || deref(a.Error) != "response timeout" || d.NextAttemptAt == nil {
			t.Fatalf("attempt %+v, delivery %+v", a, d)
		}
	})
	t.Run("connect timeout", func(t *testing.T) {
		t.Parallel()
		// A 1 ns connect budget times out every dial, without leaving loopback.
		e := newEnv(t, func(c *dispatcher.Config) {
			c.HTTP.ConnectTimeout = time.Nanosecond
			c.Schedule = dispatcher.Schedule{time.Hour}
		})
		rc := newReceiver(t, status(200))
		e.endpoint(rc.URL, nil)
		id := e.publish("a", 1)[0]
		d := e.waitStatus(id, webhookd.DeliveryRetrying, 10*time.Second)
		if a := d.Attempts[0]; a.StatusCode != nil || deref(a.Error) != "connect timeout" {
			t.Fatalf("attempt %+v", a)
		}
	})
}

func TestClientErrorsDeadLetterAtOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code   int
		reason string
	}{{401, "client_error"}, {404, "client_error"}, {302, "redirect"}, {301, "redirect"}}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			target := newReceiver(t, status(200))
			rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL, c.code) // Location is ignored for non-3xx
			})
			e.endpoint(rc.URL, nil)
			id := e.publish("a", 1)[0]
			d := e.waitStatus(id, webhookd.DeliveryDeadLetter, 10*time.Second)
			if d.AttemptsCount != 1 || len(rc.requests()) != 1 {
				t.Fatalf("%d attempts", d.AttemptsCount)
			}
			if len(target.requests()) != 0 {
				t.Fatal("a redirect was followed")
			}
			if n := e.count(`SELECT count(*) FROM dead_letters WHERE delivery_id = $1 AND reason = $2`, id, c.reason); n != 1 {
				t.Fatalf("no %s dead letter", c.reason)
			}
		})
	}
}

func TestGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	// The retry waits 3 s: the fresh delivery below must meet the 410
	// first, and with 500 ms the retry sometimes did, under -race beside
	// the other packages (CI: no delivery made for the disabled endpoint).
	e := newEnv(t, func(c *dispatcher.Config) { c.Schedule = dispatcher.Schedule{3 * time.Second} })
	gone := false
	var mu sync.Mutex
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			w.WriteHeader(410)
			return
		}
		w.WriteHeader(500)
	})
	ep := e.endpoint(rc.URL, nil)
	waiting := e.publish("a", 1)[0] // fails once, waits for its retry
	e.waitStatus(waiting, webhookd.DeliveryRetrying, 10*time.Second)
	mu.Lock()
	gone = true
	mu.Unlock()
	// A fresh delivery meets the 410 first.
	fresh := e.publish("a", 1)
	if len(fresh) == 0 {
		t.Fatal("the endpoint was disabled before the fresh event: the waiting delivery's retry met the 410 first")
	}
	e.waitStatus(fresh[0], webhookd.DeliveryDeadLetter, 10*time.Second)
	got, err := e.db.Store().GetEndpoint(context.Background(), e.project.ID, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "disabled" || deref(got.DisabledReason) != "gone" {
		t.Fatalf("endpoint after 410: %s %v", got.Status, deref(got.DisabledReason))
	}
	// The waiting delivery dies as endpoint_disabled (or client_error if
	// its retry won the race to the 410).
	e.waitStatus(waiting, webhookd.DeliveryDeadLetter, 10*time.Second)
	// New events create no deliveries for it.
	evs, err := e.db.Store().CreateEvents(context.Background(), e.project.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}}, time.Now(), func(int) string { return "" })
	if err != nil || len(evs[0].Deliveries) != 0 {
		t.Fatalf("a disabled endpoint got a delivery: %v %v", evs, err)
	}
}

func TestScheduledDeliveryForDisabledEndpointDeadLetters(t *testing.T) {
	t.Parallel()
	// The retry waits long enough for the endpoint to be disabled before
	// it, on a loaded machine under -race.
	e := newEnv(t, func(c *dispatcher.Config) { c.Schedule = dispatcher.Schedule{4 * time.Second} })
	rc := newReceiver(t, status(500))
	ep := e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	e.waitStatus(id, webhookd.DeliveryRetrying, 10*time.Second)
	disabled := "disabled"
	if _, err := e.db.Store().UpdateEndpoint(context.Background(), e.project.ID, ep.ID, storage.EndpointPatch{Status: &disabled}, time.Now()); err != nil {
		t.Fatal(err)
	}
	d := e.waitStatus(id, webhookd.DeliveryDeadLetter, 10*time.Second)
	if d.AttemptsCount != 1 || len(rc.requests()) != 1 {
		t.Fatalf("a disabled endpoint was called: %d attempts", d.AttemptsCount)
	}
	if n := e.count(`SELECT count(*) FROM dead_letters WHERE delivery_id = $1 AND reason = 'endpoint_disabled'`, id); n != 1 {
		t.Fatal("no endpoint_disabled dead letter")
	}
}

func TestReconcilerSurvivesRedisFlush(t *testing.T) {
	t.Parallel()
	// The retries wait an hour, so every delivery is waiting for its retry
	// when Redis is flushed, however slowly the machine makes the first
	// attempts; the retries are then made due in PostgreSQL, the one
	// schedule, which Redis no longer holds a task for.
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{time.Hour}
		c.ReconcileInterval = 300 * time.Millisecond
	})
	var mu sync.Mutex
	seen := map[string]int{}
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("webhook-id")
		seen[id]++
		if seen[id] == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	})
	e.endpoint(rc.URL, nil)
	ids := e.publish("a", 50)
	for _, id := range ids {
		e.waitStatus(id, webhookd.DeliveryRetrying, 20*time.Second)
	}
	ctx := context.Background()
	if err := e.redis.FlushDB(ctx).Err(); err != nil { // every scheduled retry is gone
		t.Fatal(err)
	}
	if _, err := e.db.Pool().Exec(ctx, `UPDATE deliveries SET next_attempt_at = now() WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		e.waitStatus(id, webhookd.DeliverySucceeded, 30*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 50 {
		t.Fatalf("receiver saw %d events, want 50", len(seen))
	}
	for id, n := range seen {
		if n != 2 {
			t.Fatalf("event %s was sent %d times, want twice (the failure and its retry)", id, n)
		}
	}
}

func TestTwoWorkersNeverDoubleAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.startWorker()
	var mu sync.Mutex
	seen := map[string]int{}
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("webhook-id")]++
		mu.Unlock()
		w.WriteHeader(200)
	})
	e.endpoint(rc.URL, nil)
	ids := e.publish("a", 100)
	// The reconciler of both workers runs too, re-offering every task.
	for range 3 {
		rec := &dispatcher.Reconciler{DB: e.db, Queue: e.worker.Queue, Clock: webhookd.SystemClock{}}
		if _, _, err := rec.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		e.waitStatus(id, webhookd.DeliverySucceeded, 30*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s delivered %d times", id, n)
		}
	}
	if n := e.count(`SELECT count(*) FROM attempts`); n != 100 {
		t.Fatalf("%d attempts, want 100", n)
	}
}

func TestEndpointRateLimitHoldsBackWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc := newReceiver(t, status(200))
	rate := 2
	e.endpoint(rc.URL, &rate)
	ids := e.publish("a", 6)
	for _, id := range ids {
		if d := e.waitStatus(id, webhookd.DeliverySucceeded, 20*time.Second); d.AttemptsCount != 1 {
			t.Fatalf("a held-back delivery spent %d attempts", d.AttemptsCount)
		}
	}
	got := rc.requests()
	if span := got[len(got)-1].at.Sub(got[0].at); span < 1500*time.Millisecond {
		t.Fatalf("6 deliveries at 2/s took %v; the limit did not hold them back", span)
	}
}

func TestRotatedSecretsBothSign(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc := newReceiver(t, status(200))
	ep := e.endpoint(rc.URL, nil)
	newer := newSecret(t)
	if _, err := e.db.Store().RotateSecret(context.Background(), e.project.ID, ep.ID, newer, time.Now()); err != nil {
		t.Fatal(err)
	}
	id := e.publish("a", 1)[0]
	e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	r := rc.requests()[0]
	if n := len(strings.Fields(r.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures during a rotation, want 2", n)
	}
	for _, secret := range []string{ep.Secret, newer} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(r.body, r.header); err != nil {
			t.Fatalf("secret does not verify during rotation: %v", err)
		}
	}
}

// TestUndecryptableSecretFailsItsDeliveryAlone: one event for two
// endpoints, claimed in one flush, one endpoint's secret sealed with a key
// the worker does not hold. The other delivery goes at once; the
// undecryptable one spends its attempts unsent, each logged with the
// reason and no status, and ends a dead letter on its schedule.
func TestUndecryptableSecretFailsItsDeliveryAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.worker.Stop() // both tasks wait, so the next worker's first claim flush takes them together
	good, bad := newReceiver(t, status(204)), newReceiver(t, status(204))
	e.endpoint(good.URL, nil)
	sealed := e.endpoint(bad.URL, nil)
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE endpoints SET secret = 'whenc:gone:AAAA' WHERE id = $1`,
		sealed.ID); err != nil {
		t.Fatal(err)
	}
	ids := e.publish("a", 1)
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = reg
	e.worker = e.startWorker()
	var badID string
	for _, id := range ids {
		if e.delivery(id).EndpointID == sealed.ID {
			badID = id
		} else {
			e.waitStatus(id, webhookd.DeliverySucceeded, 5*time.Second)
		}
	}
	d := e.waitStatus(badID, webhookd.DeliveryDeadLetter, 20*time.Second)
	if len(d.Attempts) != len(e.cfg.Schedule)+1 {
		t.Fatalf("%d attempts, want the schedule's %d", len(d.Attempts), len(e.cfg.Schedule)+1)
	}
	for _, a := range d.Attempts {
		if a.StatusCode != nil || a.Error == nil ||
			!strings.Contains(*a.Error, "cannot be decrypted with the configured WEBHOOKD_ENCRYPTION_KEY") {
			t.Fatalf("attempt %d: status %v, error %v", a.Number, deref(a.StatusCode), deref(a.Error))
		}
	}
	if n := e.count(`SELECT count(*) FROM dead_letters WHERE delivery_id = $1 AND reason = 'exhausted'`, badID); n != 1 {
		t.Fatal("no dead letter with reason exhausted")
	}
	if n := len(bad.requests()); n != 0 {
		t.Fatalf("the undecryptable endpoint got %d requests", n)
	}
	if n := len(good.requests()); n != 1 {
		t.Fatalf("the other endpoint got %d requests, want 1", n)
	}
	// Whether the first flush did take both: claim flushes of more than one.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "webhookd_group_commit_size" && m.GetLabel()[0].GetValue() == "claim" {
				h := m.GetHistogram()
				t.Logf("claim flushes: %d, of one claim: %d", h.GetSampleCount(), h.GetBucket()[0].GetCumulativeCount())
			}
		}
	}
}

func TestPrivateAddressesRefusedWithoutTheFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.HTTP.AllowPrivateNetworks = false
		c.Schedule = dispatcher.Schedule{time.Hour}
	})
	rc := newReceiver(t, status(200))
	port := rc.URL[strings.LastIndex(rc.URL, ":")+1:]
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]"} {
		e.endpoint(fmt.Sprintf("http://%s:%s/hook", host, port), nil)
	}
	ids := e.publish("a", 1)
	if len(ids) != 3 {
		t.Fatalf("%d deliveries", len(ids))
	}
	for _, id := range ids {
		d := e.waitStatus(id, webhookd.DeliveryRetrying, 10*time.Second)
		if a := d.Attempts[0]; a.StatusCode != nil || !strings.Contains(deref(a.Error).(string), "not allowed") {
			t.Fatalf("attempt %+v", a)
		}
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("the receiver saw %d requests", n)
	}
}

func TestManualRedeliveryOfDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc, set := switchable(t, 400, 0)
	e.endpoint(rc.URL, nil)
	id := e.publish("a", 1)[0]
	e.waitStatus(id, webhookd.DeliveryDeadLetter, 10*time.Second)

	// A failing manual attempt is logged and leaves it dead.
	e.redeliver(id, "tester")
	waitFor(t, 10*time.Second, "manual attempt logged", func() bool { return e.delivery(id).AttemptsCount == 2 })
	if d := e.delivery(id); d.Status != webhookd.DeliveryDeadLetter || d.Attempts[1].Trigger != "manual" {
		t.Fatalf("after a failed manual attempt: %s %+v", d.Status, d.Attempts[1])
	}
	set(200)
	e.redeliver(id, "tester")
	d := e.waitStatus(id, webhookd.DeliverySucceeded, 10*time.Second)
	got := rc.requests()
	if d.AttemptsCount != 3 || got[2].header.Get("X-Delivery-Attempt") != "3" || got[2].header.Get("X-Request-Id") == got[1].header.Get("X-Request-Id") {
		t.Fatalf("manual redelivery: %d attempts, headers %v", d.AttemptsCount, got[2].header)
	}
	if n := e.count(`SELECT count(*) FROM dead_letters WHERE delivery_id = $1 AND replayed_at IS NOT NULL AND replayed_by = 'tester'`, id); n != 1 {
		t.Fatal("the dead letter is not marked replayed")
	}
	if n := e.count(`SELECT count(*) FROM deliveries WHERE manual_request_id IS NOT NULL`); n != 0 {
		t.Fatal("a served redelivery request is still pending")
	}
}

func TestRedeliveryAndTestTriggerSurviveRedisFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) { c.ReconcileInterval = 200 * time.Millisecond })
	e.worker.Stop() // nothing runs until Redis has been flushed
	rc := newReceiver(t, status(200))
	ep := e.endpoint(rc.URL, nil)
	ctx := context.Background()
	evs, err := e.db.Store().CreateEvents(ctx, e.project.ID, []storage.NewEvent{{Type: webhookd.TestEventType,
		Data: json.RawMessage(`{}`), EndpointIDs: []string{ep.ID}, Trigger: webhookd.TriggerTest}}, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	testID := evs[0].Deliveries[0].ID
	manualID := e.publish("a", 1)[0]
	if _, err := e.db.Store().RequestRedelivery(ctx, e.project.ID, manualID, storage.NewRequestID(), "ops"); err != nil {
		t.Fatal(err)
	}
	if err := e.redis.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.startWorker()
	d := e.waitStatus(testID, webhookd.DeliverySucceeded, 10*time.Second)
	if d.Attempts[0].Trigger != webhookd.TriggerTest {
		t.Fatalf("test delivery logged as %q", d.Attempts[0].Trigger)
	}
	waitFor(t, 10*time.Second, "the redelivery request served", func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE manual_request_id IS NOT NULL`) == 0
	})
	d = e.delivery(manualID)
	triggers := map[string]int{}
	for _, a := range d.Attempts {
		triggers[a.Trigger]++
	}
	if triggers["manual"] != 1 || d.Status != webhookd.DeliverySucceeded {
		t.Fatalf("attempts %v, status %s; want one manual attempt", triggers, d.Status)
	}
}

// TestDeliveriesSurviveDatabaseConnectionsDropped drops every PostgreSQL
// connection of the worker mid-stream, as a PostgreSQL restart does: no
// delivery is lost.
func TestDeliveriesSurviveDatabaseConnectionsDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{time.Second, time.Second, time.Second, time.Second}
		c.ReconcileInterval = 500 * time.Millisecond
	})
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(20 * time.Millisecond) // a receiver that takes a moment, so attempts are in flight
		w.WriteHeader(200)
	})
	e.endpoint(rc.URL, nil)
	ids := e.publish("a", 40)
	waitFor(t, 10*time.Second, "some deliveries made", func() bool { return len(rc.requests()) >= 5 })
	var app string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT current_setting('application_name')`).Scan(&app); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1) t`, app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d backends (%v)", killed, err)
	}
	for _, id := range ids {
		e.waitStatus(id, webhookd.DeliverySucceeded, 30*time.Second)
	}
	seen := map[string]bool{}
	for _, r := range rc.requests() {
		seen[r.header.Get("webhook-id")] = true
	}
	if len(seen) != 40 {
		t.Fatalf("receiver saw %d of 40 events", len(seen))
	}
}

func TestReconcilerPassIsBoundedOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.worker.Stop()
	ctx := context.Background()
	e.endpoint("http://127.0.0.1:9/", nil)
	base := time.Now().Add(-time.Hour)
	var want []string
	for i := range 25 {
		evs, err := e.db.Store().CreateEvents(ctx, e.project.ID, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}},
			base.Add(time.Duration(24-i)*time.Second), func(int) string { return "" }) // later rows are due earlier
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{evs[0].Deliveries[0].ID}, want...)
	}
	rec := &dispatcher.Reconciler{DB: e.db, Queue: e.worker.Queue, Clock: webhookd.SystemClock{}, MaxPerPass: 10}
	insp := asynq.NewInspectorFromRedisClient(e.redis)
	// Each pass takes the next window; the third reaches the end, and the
	// fourth starts from the longest overdue again.
	for pass, wantQueued := range []int{10, 20, 25} {
		ran, n, err := rec.RunOnce(ctx)
		if err != nil || !ran || n != min(10, 25-pass*10) {
			t.Fatalf("pass %d: ran=%v offered %d (%v)", pass, ran, n, err)
		}
		for i, id := range want {
			_, err := insp.GetTaskInfo(dispatcher.DefaultQueue, id)
			if queued := err == nil; queued != (i < wantQueued) {
				t.Errorf("pass %d: delivery %d (due %d s after the first): queued=%v", pass, i, i, queued)
			}
		}
	}
	if _, n, _ := rec.RunOnce(ctx); n != 10 {
		t.Fatalf("after the end, a pass offered %d, want the first 10 again", n)
	}
}

// TestReconcilerRunsInOneProcessAtATime: while another process holds the
// reconciler's turn, a pass does not run.
func TestReconcilerRunsInOneProcessAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.worker.Stop()
	ctx := context.Background()
	rec := &dispatcher.Reconciler{DB: e.db, Queue: e.worker.Queue, Clock: webhookd.SystemClock{}}
	held := make(chan struct{})
	release := make(chan struct{})
	go e.db.AsLeader(ctx, "reconciler", func(context.Context) error {
		close(held)
		<-release
		return nil
	})
	<-held
	if ran, _, err := rec.RunOnce(ctx); err != nil || ran {
		t.Fatalf("ran=%v (%v) while another process holds the turn", ran, err)
	}
	close(release)
	waitFor(t, 5*time.Second, "the turn to be free", func() bool {
		ran, _, err := rec.RunOnce(ctx)
		return err == nil && ran
	})
}

// TestStopWaitsForEveryBackgroundAttempt: Stop returns once the attempts
// made without a task have finished, and one rung while it stops (as
// Queue.Wake's retryRunning rings a taken task, at any moment) either
// never starts or is waited for too: nothing runs after Stop returns, and
// under -race no attempt joins the group while Stop waits for it.
func TestStopWaitsForEveryBackgroundAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var stopped, late, done atomic.Bool
	ringing := make(chan struct{})
	go func() {
		defer close(ringing)
		for !stopped.Load() {
			e.worker.InBackground(func() {
				if stopped.Load() {
					late.Store(true)
				}
			})
			time.Sleep(time.Millisecond) // a ring a millisecond
		}
	}()
	started := make(chan struct{})
	e.worker.InBackground(func() { close(started); time.Sleep(200 * time.Millisecond); done.Store(true) })
	<-started // in flight as the worker stops
	e.worker.Stop()
	stopped.Store(true)
	<-ringing
	if !done.Load() {
		t.Fatal("Stop returned before the attempt in flight had finished")
	}
	if late.Load() {
		t.Fatal("an attempt rung while the worker stopped ran after Stop had returned")
	}
}
