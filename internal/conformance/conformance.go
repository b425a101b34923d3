// Package conformance holds the one scenario every webhookd client must
// pass (sdks/conformance/cases.json): it reads the cases, turns their
// faults into fault-proxy rules, checks what a client reported against what
// the proxy and the database saw, and serves all of it over a small control
// API so that the Node, Python and PHP SDKs' tests run the same cases, with
// the same checks, as the Go client's.
package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/webhookd/webhookd/internal/faultproxy"
)

// File is cases.json.
type File struct {
	// RateLimitWindowMS is what the API counts a project's "per minute"
	// limit over in this scenario, so pacing cases take seconds.
	RateLimitWindowMS int    `json:"rate_limit_window_ms"`
	Cases             []Case `json:"cases"`
}

// Case is one case: a project, faults, calls and what must come of them.
type Case struct {
	Name      string                      `json:"name"`
	About     string                      `json:"about"`
	RateLimit int                         `json:"rate_limit,omitempty"` // per window; 0: the default plan
	Faults    map[string]faultproxy.Fault `json:"faults,omitempty"`     // by request number from 1, or "*"
	Retry     Retry                       `json:"retry"`
	Calls     []Call                      `json:"calls"`
	Expect    Expect                      `json:"expect"`
}

// Retry is the retry policy a runner gives its client; zero fields keep
// the client's defaults.
type Retry struct {
	MaxAttempts int `json:"max_attempts,omitempty"`
	BaseDelayMS int `json:"base_delay_ms,omitempty"`
	MaxDelayMS  int `json:"max_delay_ms,omitempty"`
}

// Call is one logical operation (repeated Repeat times, Concurrency at
// once where the language allows).
type Call struct {
	Op             string          `json:"op"` // send_event, get_event or send_bulk
	Type           string          `json:"type,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	ExternalID     string          `json:"external_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	ID             string          `json:"id,omitempty"`
	Repeat         int             `json:"repeat,omitempty"`
	Concurrency    int             `json:"concurrency,omitempty"`
	CancelAfterMS  int             `json:"cancel_after_ms,omitempty"`
	ExpectError    *ExpectError    `json:"expect_error,omitempty"` // nil: the call must succeed
	// Events are send_bulk's lines: the runner streams them as one bulk
	// job, waits for the job with a progress callback, lists its refused
	// lines, and reports the job (Result.Job) with the job id as Result.ID.
	Events    []json.RawMessage `json:"events,omitempty"`
	ExpectJob *ExpectJob        `json:"expect_job,omitempty"`
}

// ExpectJob is what a send_bulk call's finished job must show.
type ExpectJob struct {
	Status      string   `json:"status"`
	Total       int      `json:"total"`
	Done        int      `json:"done"`
	FailedCount int      `json:"failed_count"`
	ErrorLines  []int    `json:"error_lines"` // the refused lines' numbers, in order
	ErrorCodes  []string `json:"error_codes"` // and their codes
}

// ExpectError is what a failed call's typed error must carry; empty fields
// are not checked.
type ExpectError struct {
	Status          int    `json:"status,omitempty"`
	Code            string `json:"code,omitempty"`
	Field           string `json:"field,omitempty"`
	RequestID       string `json:"request_id,omitempty"`
	RequestIDPrefix string `json:"request_id_prefix,omitempty"`
	Attempts        int    `json:"attempts,omitempty"`
	Cancelled       bool   `json:"cancelled,omitempty"`
}

// Expect is what the proxy and the database must have seen.
type Expect struct {
	Events                int      `json:"events"`
	Requests              *int     `json:"requests,omitempty"`      // nil: not counted (a job's readings vary in number)
	BulkRequests          int      `json:"bulk_requests,omitempty"` // this many POST /v1/events/bulk requests
	SameKey               bool     `json:"same_key,omitempty"`
	LastReplayed          bool     `json:"last_replayed,omitempty"`
	MinGapMS              int      `json:"min_gap_ms,omitempty"`
	DistinctKeys          int      `json:"distinct_keys,omitempty"`
	GeneratedKeysAreUUIDs int      `json:"generated_keys_are_uuids,omitempty"` // this many requests carry a generated UUIDv4 key
	NoStatus              []int    `json:"no_status,omitempty"`
	MaxElapsedMS          int      `json:"max_elapsed_ms,omitempty"`
	SameIDs               [][2]int `json:"same_ids,omitempty"`      // pairs of result indexes
	DifferentIDs          [][2]int `json:"different_ids,omitempty"` // pairs of result indexes
}

// Outcome is what a runner reports: one result per call made (a call
// repeated n times makes n results, in any order among themselves), and
// how long the whole case took.
type Outcome struct {
	Results   []Result `json:"results"`
	ElapsedMS int      `json:"elapsed_ms"`
}

// Result is one call's end: an id, or a typed error.
type Result struct {
	OK    bool         `json:"ok"`
	ID    string       `json:"id,omitempty"`
	Error *ResultError `json:"error,omitempty"`
	Job   *ResultJob   `json:"job,omitempty"` // send_bulk's job, as the client's wait returned it
}

// ResultJob is a send_bulk call's job: as the wait returned it, each
// reading the progress callback got, and the refused lines the client
// listed.
type ResultJob struct {
	Status      string        `json:"status"`
	Total       int           `json:"total"`
	Done        int           `json:"done"`
	FailedCount int           `json:"failed_count"`
	Progress    []JobProgress `json:"progress"`
	Errors      []JobLine     `json:"errors"`
}

// JobProgress is one call of a wait's progress callback.
type JobProgress struct {
	Status      string `json:"status"`
	Total       int    `json:"total"`
	Done        int    `json:"done"`
	FailedCount int    `json:"failed_count"`
}

// JobLine is a refused line as the client listed it.
type JobLine struct {
	Line  int    `json:"line"`
	Code  string `json:"code"`
	Field string `json:"field"`
}

// ResultError is the client's typed error as the runner read it.
type ResultError struct {
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field"`
	RequestID string `json:"request_id"`
	Attempts  int    `json:"attempts"`
	Cancelled bool   `json:"cancelled"`
}

// Load reads a cases file.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("conformance: %s: %w", path, err)
	}
	if len(f.Cases) == 0 {
		return nil, fmt.Errorf("conformance: %s has no cases", path)
	}
	return &f, nil
}

// Case returns the case named name.
func (f *File) Case(name string) (Case, bool) {
	for _, c := range f.Cases {
		if c.Name == name {
			return c, true
		}
	}
	return Case{}, false
}

// Rule is the fault-proxy rule of the case's faults.
func (c Case) Rule() faultproxy.Rule {
	return func(n int, _ *http.Request) faultproxy.Fault {
		if f, ok := c.Faults[strconv.Itoa(n)]; ok {
			return f
		}
		return c.Faults["*"]
	}
}

// Results is how many results the case's calls make.
func (c Case) Results() int {
	n := 0
	for _, call := range c.Calls {
		n += max(call.Repeat, 1)
	}
	return n
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Check compares a runner's outcome, the requests the proxy saw and the
// number of events the project holds with what the case expects, and
// returns every difference (none: the case passed).
func Check(c Case, out Outcome, seen []faultproxy.Seen, events int) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(out.Results) != c.Results() {
		bad("%d results reported, want %d", len(out.Results), c.Results())
	} else {
		i := 0
		for _, call := range c.Calls {
			for range max(call.Repeat, 1) {
				checkResult(i, call.ExpectError, out.Results[i], bad)
				if call.ExpectJob != nil && out.Results[i].OK {
					checkJob(i, *call.ExpectJob, out.Results[i], bad)
				}
				i++
			}
		}
	}
	e := c.Expect
	if events != e.Events {
		bad("the project holds %d events, want %d", events, e.Events)
	}
	if e.Requests != nil && len(seen) != *e.Requests {
		bad("the API got %d requests, want %d", len(seen), *e.Requests)
	}
	if e.BulkRequests > 0 {
		n := 0
		for _, s := range seen {
			if s.Method == http.MethodPost && s.Path == "/v1/events/bulk" {
				n++
			}
		}
		if n != e.BulkRequests {
			bad("the API got %d POST /v1/events/bulk requests, want %d", n, e.BulkRequests)
		}
	}
	keys := map[string]bool{}
	generated := 0
	for i, s := range seen {
		keys[s.IdempotencyKey] = true
		if uuidV4.MatchString(s.IdempotencyKey) {
			generated++
		}
		if e.SameKey && (s.IdempotencyKey == "" || s.IdempotencyKey != seen[0].IdempotencyKey) {
			bad("request %d carried Idempotency-Key %q, want every try to carry the first one's %q", i+1, s.IdempotencyKey, seen[0].IdempotencyKey)
		}
		for _, st := range e.NoStatus {
			if s.Status == st {
				bad("request %d was answered %d", i+1, st)
			}
		}
		if i > 0 && e.MinGapMS > 0 {
			if gap := s.At.Sub(seen[i-1].At); gap.Milliseconds() < int64(e.MinGapMS) {
				bad("request %d came %v after the one before, want at least %d ms (Retry-After)", i+1, gap, e.MinGapMS)
			}
		}
	}
	if e.LastReplayed && (len(seen) == 0 || !seen[len(seen)-1].Replayed) {
		bad("the last request was not answered from the idempotency record (Idempotent-Replayed)")
	}
	if e.DistinctKeys > 0 && len(keys) != e.DistinctKeys {
		bad("%d distinct Idempotency-Keys, want %d", len(keys), e.DistinctKeys)
	}
	if e.GeneratedKeysAreUUIDs > 0 && generated != e.GeneratedKeysAreUUIDs {
		bad("%d requests carried a generated UUIDv4 key, want %d", generated, e.GeneratedKeysAreUUIDs)
	}
	if e.MaxElapsedMS > 0 && out.ElapsedMS > e.MaxElapsedMS {
		bad("the case took %d ms, want at most %d", out.ElapsedMS, e.MaxElapsedMS)
	}
	id := func(i int) string {
		if i < len(out.Results) {
			return out.Results[i].ID
		}
		return ""
	}
	for _, p := range e.SameIDs {
		if id(p[0]) == "" || id(p[0]) != id(p[1]) {
			bad("results %d and %d gave ids %q and %q, want the same event", p[0], p[1], id(p[0]), id(p[1]))
		}
	}
	for _, p := range e.DifferentIDs {
		if id(p[0]) == "" || id(p[0]) == id(p[1]) {
			bad("results %d and %d gave ids %q and %q, want two events", p[0], p[1], id(p[0]), id(p[1]))
		}
	}
	return problems
}

func checkResult(i int, want *ExpectError, got Result, bad func(string, ...any)) {
	if want == nil {
		if !got.OK || got.ID == "" {
			bad("result %d: %+v, want success with an id", i, describe(got))
		}
		return
	}
	if got.OK || got.Error == nil {
		bad("result %d succeeded, want an error %+v", i, *want)
		return
	}
	g := got.Error
	switch {
	case want.Cancelled != g.Cancelled:
		bad("result %d: cancelled %v, want %v (%s)", i, g.Cancelled, want.Cancelled, describe(got))
	case want.Status != 0 && g.Status != want.Status,
		want.Code != "" && g.Code != want.Code,
		want.Field != "" && g.Field != want.Field,
		want.RequestID != "" && g.RequestID != want.RequestID,
		want.RequestIDPrefix != "" && !strings.HasPrefix(g.RequestID, want.RequestIDPrefix),
		want.Attempts != 0 && g.Attempts != want.Attempts:
		bad("result %d: error %s, want %+v", i, describe(got), *want)
	}
}

// checkJob compares a send_bulk call's job with what the case expects: its
// counts, its refused lines, and progress calls that never go back and end
// with the finished job.
func checkJob(i int, want ExpectJob, got Result, bad func(string, ...any)) {
	j := got.Job
	if j == nil {
		bad("result %d: no job reported", i)
		return
	}
	if !strings.HasPrefix(got.ID, "job_") {
		bad("result %d: id %q, want a job id", i, got.ID)
	}
	if j.Status != want.Status || j.Total != want.Total || j.Done != want.Done || j.FailedCount != want.FailedCount {
		bad("result %d: job %s %d/%d failed %d, want %s %d/%d failed %d", i, j.Status, j.Done, j.Total, j.FailedCount,
			want.Status, want.Done, want.Total, want.FailedCount)
	}
	var lines []int
	var codes []string
	for _, e := range j.Errors {
		lines, codes = append(lines, e.Line), append(codes, e.Code)
	}
	if fmt.Sprint(lines) != fmt.Sprint(want.ErrorLines) || fmt.Sprint(codes) != fmt.Sprint(want.ErrorCodes) {
		bad("result %d: refused lines %v %v, want %v %v", i, lines, codes, want.ErrorLines, want.ErrorCodes)
	}
	if len(j.Progress) == 0 {
		bad("result %d: the progress callback was never called", i)
		return
	}
	for k := 1; k < len(j.Progress); k++ {
		if p, q := j.Progress[k-1], j.Progress[k]; q.Done < p.Done || q.FailedCount < p.FailedCount {
			bad("result %d: progress went back from %+v to %+v", i, p, q)
		}
	}
	if last := j.Progress[len(j.Progress)-1]; last != (JobProgress{j.Status, j.Total, j.Done, j.FailedCount}) {
		bad("result %d: the last progress call %+v is not the finished job", i, last)
	}
}

func describe(r Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}
