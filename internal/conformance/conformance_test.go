package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/faultproxy"
)

func load(t *testing.T) *File {
	t.Helper()
	f, err := Load("../../sdks/conformance/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// passing is what a client that does everything right reports for the
// dropped-answer case, and what the proxy and database then hold.
func passing(t *testing.T, f *File) (Case, Outcome, []faultproxy.Seen) {
	c, ok := f.Case("dropped_response_then_retry_creates_one_event")
	if !ok {
		t.Fatal("no dropped_response_then_retry_creates_one_event case")
	}
	now := time.Now()
	key := "0b8f3c3e-6a43-4d3e-9a3b-2f1d5c7e9a10"
	return c, Outcome{Results: []Result{{OK: true, ID: "evt_1"}}, ElapsedMS: 50},
		[]faultproxy.Seen{{Path: "/v1/events", IdempotencyKey: key, At: now},
			{Path: "/v1/events", IdempotencyKey: key, At: now.Add(10 * time.Millisecond), Status: 202, Replayed: true}}
}

// TestCheckFindsWhatIsWrong keeps the checker honest: a client that did
// nothing fails every case, and each way of getting the dropped-answer case
// wrong is reported, while doing it right is not.
func TestCheckFindsWhatIsWrong(t *testing.T) {
	f := load(t)
	for _, c := range f.Cases {
		if p := Check(c, Outcome{}, nil, -1); len(p) == 0 {
			t.Errorf("%s: an empty outcome passed", c.Name)
		}
	}
	c, out, seen := passing(t, f)
	if p := Check(c, out, seen, 1); len(p) != 0 {
		t.Fatalf("a right run was refused: %v", p)
	}
	wrongKey := append([]faultproxy.Seen(nil), seen...)
	wrongKey[1].IdempotencyKey = "another"
	notReplayed := append([]faultproxy.Seen(nil), seen...)
	notReplayed[1].Replayed = false
	for name, tc := range map[string]struct {
		out    Outcome
		seen   []faultproxy.Seen
		events int
		want   string
	}{
		"two events":          {out, seen, 2, "2 events"},
		"a new key on retry":  {out, wrongKey, 1, "Idempotency-Key"},
		"not replayed":        {out, notReplayed, 1, "idempotency record"},
		"one request":         {out, seen[:1], 1, "1 requests"},
		"failed call":         {Outcome{Results: []Result{{Error: &ResultError{Status: 503}}}}, seen, 1, "want success"},
		"two results for one": {Outcome{Results: []Result{{OK: true, ID: "a"}, {OK: true, ID: "b"}}}, seen, 1, "2 results"},
	} {
		p := Check(c, tc.out, tc.seen, tc.events)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "; "), tc.want) {
			t.Errorf("%s: problems %q, want one about %q", name, p, tc.want)
		}
	}
}

func TestCheckPacingAndCancel(t *testing.T) {
	f := load(t)
	pacing, _ := f.Case("pacing_keeps_a_loop_under_the_limit")
	var results []Result
	var seen []faultproxy.Seen
	for range pacing.Results() {
		results = append(results, Result{OK: true, ID: "evt"})
		seen = append(seen, faultproxy.Seen{Status: 202})
	}
	if p := Check(pacing, Outcome{Results: results}, seen, len(seen)); len(p) != 0 {
		t.Fatalf("a paced run was refused: %v", p)
	}
	seen[7].Status = 429
	if p := Check(pacing, Outcome{Results: results}, seen, len(seen)); len(p) == 0 {
		t.Error("a run that met a 429 passed the pacing case")
	}
	cancel, _ := f.Case("cancelled_call_stops_at_once")
	out := Outcome{Results: []Result{{Error: &ResultError{Cancelled: true, Status: 503}}}, ElapsedMS: 350}
	one := []faultproxy.Seen{{Status: 503}}
	if p := Check(cancel, out, one, 0); len(p) != 0 {
		t.Fatalf("a cancelled call was refused: %v", p)
	}
	out.ElapsedMS = 30_000
	if p := Check(cancel, out, one, 0); len(p) == 0 {
		t.Error("a call that waited out the Retry-After passed the cancel case")
	}
	out = Outcome{Results: []Result{{Error: &ResultError{Status: 503}}}, ElapsedMS: 350}
	if p := Check(cancel, out, one, 0); len(p) == 0 {
		t.Error("a call that was not cancelled passed the cancel case")
	}
}

// TestCheckJob keeps the bulk case's checks honest: the job a right client
// reports passes, and a wrong count, a missing refused line or progress
// calls that go back or stop short are each reported.
func TestCheckJob(t *testing.T) {
	c, ok := load(t).Case("bulk_job_streamed_with_a_refused_line")
	if !ok {
		t.Fatal("no bulk_job_streamed_with_a_refused_line case")
	}
	right := func() Outcome {
		return Outcome{Results: []Result{{OK: true, ID: "job_1", Job: &ResultJob{Status: "succeeded", Total: 5, Done: 4,
			FailedCount: 1, Errors: []JobLine{{Line: 3, Code: "validation_failed", Field: "type"}},
			Progress: []JobProgress{{"queued", 5, 0, 0}, {"running", 5, 2, 1}, {"succeeded", 5, 4, 1}}}}}}
	}
	key := "0b8f3c3e-6a43-4d3e-9a3b-2f1d5c7e9a10"
	seen := []faultproxy.Seen{{Method: "POST", Path: "/v1/events/bulk", IdempotencyKey: key, Status: 202},
		{Method: "GET", Path: "/v1/jobs/job_1", Status: 200}, {Method: "GET", Path: "/v1/jobs/job_1/errors", Status: 200}}
	if p := Check(c, right(), seen, 4); len(p) != 0 {
		t.Fatalf("a right run was refused: %v", p)
	}
	for name, tc := range map[string]struct {
		change func(*ResultJob)
		want   string
	}{
		"a wrong count":        {func(j *ResultJob) { j.Done = 5 }, "job succeeded 5/5"},
		"no refused line":      {func(j *ResultJob) { j.Errors = nil }, "refused lines"},
		"progress going back":  {func(j *ResultJob) { j.Progress[1].Done = 5 }, "progress went back"},
		"progress stops short": {func(j *ResultJob) { j.Progress = j.Progress[:2] }, "not the finished job"},
		"no progress":          {func(j *ResultJob) { j.Progress = nil }, "never called"},
	} {
		out := right()
		tc.change(out.Results[0].Job)
		p := Check(c, out, seen, 4)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "; "), tc.want) {
			t.Errorf("%s: problems %v, want one saying %q", name, p, tc.want)
		}
	}
	if p := Check(c, right(), append(seen, seen[0]), 4); len(p) == 0 {
		t.Error("two POSTs passed")
	}
}
