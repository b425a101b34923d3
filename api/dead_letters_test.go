package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/deadletter"
	"github.com/webhookd/webhookd/storage"
)

var (
	deadLetterKeys = []string{"id", "delivery_id", "event_id", "endpoint_id", "event_type", "reason",
		"last_status_code", "dead_lettered_at", "replayed_at"}
	jobKeys = []string{"id", "kind", "status", "total", "done", "failed_count", "created_at", "finished_at"}
)

// deadLetters lists dead letters and returns them by delivery id, in order.
func (h *harness) deadLetters(t *testing.T, query string) []string {
	t.Helper()
	r := h.do(req{method: "GET", path: "/v1/dead-letters" + query})
	expectStatus(t, r, http.StatusOK)
	var out []string
	for _, d := range r.json(t)["data"].([]any) {
		out = append(out, d.(map[string]any)["delivery_id"].(string))
	}
	return out
}

func TestListDeadLetters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	b := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/b"})["id"].(string)
	ev1, d1 := h.send("order.created", a, b)
	_, d2 := h.send("user.created", a)
	h.deadLetter(d1[0])
	h.deadLetter(d1[1])
	h.clock.Advance(time.Hour)
	later := h.clock.Now()
	h.deadLetter(d2[0])
	h.send("user.created", b) // pending: not a dead letter
	all := []string{d2[0], d1[1], d1[0]}

	r := h.do(req{method: "GET", path: "/v1/dead-letters"})
	expectStatus(t, r, http.StatusOK)
	list := r.json(t)["data"].([]any)
	if r.json(t)["next_cursor"] != nil || len(list) != 3 {
		t.Fatalf("list %s", r.body)
	}
	first := list[2].(map[string]any)
	expectKeys(t, first, deadLetterKeys...)
	if !strings.HasPrefix(first["id"].(string), "dl_") || first["delivery_id"] != d1[0] || first["event_id"] != ev1 ||
		first["endpoint_id"] != a || first["event_type"] != "order.created" || first["reason"] != "exhausted" ||
		first["last_status_code"] != 500.0 || first["replayed_at"] != nil || first["dead_lettered_at"] == nil {
		t.Fatalf("dead letter %v", first)
	}

	since := later.Add(-time.Minute).Format(time.RFC3339)
	cases := map[string][]string{
		"":                          all,
		"?endpoint_id=" + a:         {d2[0], d1[0]},
		"?endpoint_id=" + b:         {d1[1]},
		"?event_type=order.created": {d1[1], d1[0]},
		"?since=" + since:           {d2[0]},
		"?until=" + since:           {d1[1], d1[0]},
		"?endpoint_id=ep_nope":      nil,
		"?event_type=user.created&since=" + since + "&endpoint_id=" + a: {d2[0]},
	}
	for q, want := range cases {
		if got := h.deadLetters(t, q); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", q, got, want)
		}
	}

	// Pages of one.
	var seen []string
	for path := "/v1/dead-letters?limit=1"; ; {
		r := h.do(req{method: "GET", path: path})
		expectStatus(t, r, http.StatusOK)
		page, next := ids(t, r)
		seen = append(seen, page...)
		if next == "" || len(seen) > 3 {
			break
		}
		path = "/v1/dead-letters?limit=1&cursor=" + next
	}
	if len(seen) != 3 || seen[0] == seen[1] || seen[1] == seen[2] {
		t.Fatalf("pages %v", seen)
	}

	// A replayed dead letter stays listed, with replayed_at.
	h.attempt(d1[0], webhookd.Attempt{StatusCode: new(200), Trigger: webhookd.TriggerManual},
		storage.Transition{Status: webhookd.DeliverySucceeded, ReplayedBy: "api"})
	r = h.do(req{method: "GET", path: "/v1/dead-letters?endpoint_id=" + a})
	expectStatus(t, r, http.StatusOK)
	replayed := r.json(t)["data"].([]any)[1].(map[string]any)
	if replayed["delivery_id"] != d1[0] || replayed["replayed_at"] == nil {
		t.Fatalf("replayed %v", replayed)
	}

	for q, field := range map[string]string{"since=x": "since", "until=2025": "until", "limit=101": "limit"} {
		r := h.do(req{method: "GET", path: "/v1/dead-letters?" + q})
		expectStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["error"].(map[string]any)["field"]; f != field {
			t.Errorf("%s: %s", q, r.body)
		}
	}
	other := h.newKey("other", storage.ProjectPlan{})
	r = h.do(req{method: "GET", path: "/v1/dead-letters", key: other})
	if got, _ := ids(t, r); len(got) != 0 {
		t.Fatalf("another project sees %v", got)
	}
}

// twoEndpointsDeadLettered makes endpoints a and b and three events to
// both whose six deliveries are dead letters; it returns a and the
// deliveries to a.
func (h *harness) twoEndpointsDeadLettered() (a string, onA []string) {
	h.t.Helper()
	a = h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	b := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/b"})["id"].(string)
	for range 3 {
		_, ds := h.send("order.created", a, b)
		h.deadLetter(ds[0])
		h.deadLetter(ds[1])
		onA = append(onA, ds[0])
	}
	return a, onA
}

func TestReplayDeadLettersJob(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, withEnqueuer(rec))
	a, onA := h.twoEndpointsDeadLettered()

	r := h.do(req{method: "POST", path: "/v1/dead-letters/replay", body: "{}"})
	expectStatus(t, r, http.StatusBadRequest)
	if r.errorCode(t) != "idempotency_key_required" {
		t.Fatalf("without a key: %s", r.body)
	}
	bad := map[string]string{`{"endpoint":"x"}`: "endpoint", `{"since":"today"}`: "since", `{"until":5}`: "until",
		`{"since":"2025-01-02T00:00:00Z","until":"2025-01-01T00:00:00Z"}`: "until", `[]`: "body"}
	for body, field := range bad {
		r := h.do(req{method: "POST", path: "/v1/dead-letters/replay", body: body, idem: "bad " + body})
		expectStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["error"].(map[string]any)["field"]; f != field {
			t.Errorf("%s: %s", body, r.body)
		}
	}
	if n := h.count("jobs"); n != 0 {
		t.Fatalf("%d jobs made by bad requests", n)
	}

	body := fmt.Sprintf(`{"endpoint_id":%q,"event_type":"order.created","since":null}`, a)
	r = h.do(req{method: "POST", path: "/v1/dead-letters/replay", body: body, idem: "replay"})
	expectStatus(t, r, http.StatusAccepted)
	created := r.json(t)
	expectKeys(t, created, "job_id")
	jobID, _ := created["job_id"].(string)
	if !strings.HasPrefix(jobID, "job_") {
		t.Fatalf("replay answered %s", r.body)
	}
	if got := h.enqueued(rec); got[len(got)-1] != "job "+jobID {
		t.Fatalf("enqueued %v", got)
	}
	again := h.do(req{method: "POST", path: "/v1/dead-letters/replay", body: body, idem: "replay"})
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) || h.count("jobs") != 1 {
		t.Fatalf("repeat made another job: %s", again.body)
	}

	r = h.do(req{method: "GET", path: "/v1/jobs/" + jobID})
	expectStatus(t, r, http.StatusOK)
	job := r.json(t)
	expectKeys(t, job, jobKeys...)
	if job["id"] != jobID || job["kind"] != "dead_letter_replay" || job["status"] != "queued" || job["total"] != 0.0 ||
		job["done"] != 0.0 || job["failed_count"] != 0.0 || job["finished_at"] != nil || job["created_at"] == nil {
		t.Fatalf("queued job %s", r.body)
	}

	// The runner replays the three dead letters on endpoint a; one fails.
	var attempted []string
	rp := &deadletter.Replayer{DB: h.db, Attempt: func(_ context.Context, deliveryID, by string) (bool, error) {
		if by != "job:"+jobID {
			t.Errorf("attempt by %q", by)
		}
		attempted = append(attempted, deliveryID)
		return deliveryID != onA[1], nil
	}}
	if err := rp.Run(context.Background(), jobID); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(attempted, onA) {
		t.Fatalf("attempted %v, want %v", attempted, onA)
	}
	job = h.do(req{method: "GET", path: "/v1/jobs/" + jobID}).json(t)
	if job["status"] != "succeeded" || job["total"] != 3.0 || job["done"] != 3.0 || job["failed_count"] != 1.0 ||
		job["finished_at"] == nil {
		t.Fatalf("finished job %v", job)
	}

	expectStatus(t, h.do(req{method: "GET", path: "/v1/jobs/job_nope"}), http.StatusNotFound)
	r = h.do(req{method: "GET", path: "/v1/jobs/" + jobID, key: h.newKey("other", storage.ProjectPlan{})})
	expectStatus(t, r, http.StatusNotFound)
}

// TestEnableReplaysTheOutage: PATCH {"status":"active","replay_dead_letters":true}
// on a disabled endpoint enables it and makes one replay job, in the same
// transaction, over its dead letters since its outage began (failing_since),
// named in Webhookd-Replay-Job and enqueued; replay_dead_letters anywhere
// else is 400 validation_failed and changes nothing.
func TestEnableReplaysTheOutage(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, withEnqueuer(rec))
	a, onA := h.twoEndpointsDeadLettered()
	ctx := context.Background()
	// The first dead letter of a is older than the outage.
	if _, err := h.db.Pool().Exec(ctx, `UPDATE dead_letters SET dead_lettered_at = '2000-01-01Z' WHERE delivery_id = $1`, onA[0]); err != nil {
		t.Fatal(err)
	}

	for body, why := range map[string]string{
		`{"replay_dead_letters":true}`:                     "without status",
		`{"status":"active","replay_dead_letters":true}`:   "on an active endpoint",
		`{"status":"disabled","replay_dead_letters":true}`: "when disabling",
		`{"status":"active","replay_dead_letters":"yes"}`:  "not a boolean",
	} {
		r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + a, body: body})
		expectStatus(t, r, http.StatusBadRequest)
		if f := r.json(t)["error"].(map[string]any)["field"]; f != "replay_dead_letters" {
			t.Errorf("%s: %s", why, r.body)
		}
	}
	if n := h.count("jobs"); n != 0 {
		t.Fatalf("%d jobs made by refused requests", n)
	}
	if _, err := h.db.Pool().Exec(ctx, `UPDATE endpoints SET status = 'disabled', disabled_reason = 'failing',
		failing_since = '2001-01-01Z' WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	r := h.do(req{method: "PATCH", path: "/v1/endpoints/" + a, body: `{"status":"active","replay_dead_letters":true}`})
	expectStatus(t, r, http.StatusOK)
	if ep := r.json(t); ep["status"] != "active" || ep["disabled_reason"] != nil {
		t.Fatalf("enabled %s", r.body)
	}
	jobID := r.header.Get("Webhookd-Replay-Job")
	if !strings.HasPrefix(jobID, "job_") || h.count("jobs") != 1 {
		t.Fatalf("Webhookd-Replay-Job %q, %d jobs", jobID, h.count("jobs"))
	}
	if got := h.enqueued(rec); got[len(got)-1] != "job "+jobID {
		t.Fatalf("enqueued %v", got)
	}
	var attempted []string
	rp := &deadletter.Replayer{DB: h.db, Attempt: func(_ context.Context, deliveryID, _ string) (bool, error) {
		attempted = append(attempted, deliveryID)
		return true, nil
	}}
	if err := rp.Run(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(attempted, onA[1:]) {
		t.Fatalf("the job replayed %v, want the outage's %v", attempted, onA[1:])
	}
}
