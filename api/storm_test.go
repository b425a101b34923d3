package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// smallPool reopens h's schema through a pool of n connections and serves
// the API from it.
func smallPool(t *testing.T, h *harness, n int32) {
	t.Helper()
	var schema string
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	db, err := storage.Open(context.Background(), storage.Config{URL: testenv.DatabaseURL(), SearchPath: schema, MaxConns: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	h.db = db
	h.srv = h.newServer()
}

// TestRetryStormIsAnsweredFromTheRecords: after a network blip every client
// retries at once (SPEC §2, "Retry storms are cheap"). A wave of repeats of
// finished requests, events and endpoint creations, many times larger than
// the connection pool, is answered from the records, beside fresh requests,
// 40 identical requests on one fresh key and 40 racing on one key with two
// bodies: every one of them promptly and rightly, and nothing is written
// twice.
func TestRetryStormIsAnsweredFromTheRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	smallPool(t, h, 4)
	h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	const finished = 20
	firsts := map[string]response{}
	for i := range finished {
		k := fmt.Sprint("event-", i)
		firsts[k] = h.do(req{method: "POST", path: "/v1/events", body: fmt.Sprintf(`{"type":"a","data":%d}`, i), idem: k})
		expectStatus(t, firsts[k], http.StatusAccepted)
		k = fmt.Sprint("endpoint-", i)
		firsts[k] = h.do(req{method: "POST", path: "/v1/endpoints", body: fmt.Sprintf(`{"url":"http://127.0.0.1:9/%d"}`, i), idem: k})
		expectStatus(t, firsts[k], http.StatusCreated)
	}
	events, endpoints := h.count("events"), h.count("endpoints")

	type sent struct {
		req  req
		kind string // repeat, fresh, same (one fresh key), race-a, race-b
	}
	var wave []sent
	for round := range 4 {
		for i := range finished {
			wave = append(wave,
				sent{req{method: "POST", path: "/v1/events", body: fmt.Sprintf(`{"type":"a","data":%d}`, i), idem: fmt.Sprint("event-", i)}, "repeat"},
				sent{req{method: "POST", path: "/v1/endpoints", body: fmt.Sprintf(`{"url":"http://127.0.0.1:9/%d"}`, i), idem: fmt.Sprint("endpoint-", i)}, "repeat"})
		}
		for i := range 5 {
			wave = append(wave, sent{req{method: "POST", path: "/v1/events", body: `{"type":"fresh","data":1}`, idem: fmt.Sprint("fresh-", round, "-", i)}, "fresh"})
		}
	}
	for i := range 40 {
		wave = append(wave, sent{req{method: "POST", path: "/v1/events", body: `{"type":"same","data":1}`, idem: "one-fresh-key"}, "same"})
		kind, body := "race-a", `{"type":"race","data":"a"}`
		if i%2 == 1 {
			kind, body = "race-b", `{"type":"race","data":"b"}`
		}
		wave = append(wave, sent{req{method: "POST", path: "/v1/events", body: body, idem: "raced-key"}, kind})
	}

	out := make([]response, len(wave))
	took := make([]time.Duration, len(wave))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range wave {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			out[i] = h.do(s.req)
			took[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()

	// Every answer came promptly: a stall (a pool deadlocked by requests
	// holding one connection while waiting for another) would hold them
	// for the request timeout.
	for i, d := range took {
		if d > 5*time.Second {
			t.Errorf("%s %s (key %s) answered after %v", wave[i].req.method, wave[i].req.path, wave[i].req.idem, d)
		}
	}
	fresh := map[string]int{}
	bodies := map[string]map[string]bool{}
	for i, s := range wave {
		r := out[i]
		replayed := r.header.Get("Idempotent-Replayed") == "true"
		switch s.kind {
		case "repeat":
			if !replayed || !bytes.Equal(r.body, firsts[s.req.idem].body) {
				t.Fatalf("repeat of %s: %d %s, want the first answer replayed", s.req.idem, r.status, r.body)
			}
		case "fresh":
			expectStatus(t, r, http.StatusAccepted)
		default:
			if r.status == http.StatusUnprocessableEntity && s.kind != "same" {
				bodies[s.kind+"-mismatch"] = map[string]bool{}
				continue
			}
			expectStatus(t, r, http.StatusAccepted)
			if !replayed {
				fresh[s.kind]++
			}
			if bodies[s.kind] == nil {
				bodies[s.kind] = map[string]bool{}
			}
			bodies[s.kind][string(r.body)] = true
		}
	}
	if fresh["same"] != 1 || len(bodies["same"]) != 1 {
		t.Fatalf("one fresh key: %d fresh answers and %d bodies, want 1 and 1", fresh["same"], len(bodies["same"]))
	}
	// Of the race, one body won: its requests got one answer, the others 422.
	won := 0
	for _, kind := range []string{"race-a", "race-b"} {
		if bodies[kind] != nil {
			won++
			if len(bodies[kind]) != 1 || fresh[kind] != 1 || bodies[kind+"-mismatch"] != nil {
				t.Fatalf("%s won with %d bodies and %d fresh answers, and also got 422s: %v", kind, len(bodies[kind]), fresh[kind], bodies)
			}
		}
	}
	if won != 1 {
		t.Fatalf("%d bodies won the race for one key, want 1", won)
	}
	if got, want := h.count("events"), events+4*5+1+1; got != want {
		t.Fatalf("%d events, want %d", got, want)
	}
	if got := h.count("endpoints"); got != endpoints {
		t.Fatalf("%d endpoints, want %d: a repeat created one", got, endpoints)
	}
}
