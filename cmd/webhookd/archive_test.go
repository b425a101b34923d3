package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// laterClock is a clock ahead of now by its value.
type laterClock time.Duration

func (c laterClock) Now() time.Time { return time.Now().Add(time.Duration(c)).UTC() }

// TestArchiveCommandsReadTheArchiveAlone: once retention has archived and
// dropped a day with a dead letter, `archive list`, `show` and `replay`
// work from the archive directory alone — replay through a real API, as a
// new event for the dead letter's endpoint — and an unknown id, or a file
// that no longer verifies, exits 1.
func TestArchiveCommandsReadTheArchiveAlone(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true}, nil)
	ctx := context.Background()
	s := m.DB.Store()
	var projectID string
	if err := m.DB.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE name = 'e2e'`).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, projectID, storage.NewEndpoint{URL: "http://127.0.0.1:9/hook", Secret: "whsec_AAAA"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.CreateEvents(ctx, projectID, []storage.NewEvent{{Type: "order.paid", Data: json.RawMessage(`{"order":7,"note":"a\\b"}`)}},
		time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	evt, dlv := evs[0].ID, evs[0].Deliveries[0].ID
	code := 500
	testenv.Record(t, m.DB, dlv, webhookd.Attempt{StatusCode: &code},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted})
	var dl string
	if err := m.DB.Pool().QueryRow(ctx, `SELECT id FROM dead_letters WHERE delivery_id = $1`, dlv).Scan(&dl); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "archive")
	r := &dispatcher.Retention{DB: m.DB, Keep: time.Nanosecond, Clock: laterClock(48 * time.Hour),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ArchiveDir: dir}
	if _, p, err := r.RunOnce(ctx); err != nil || p.Days == 0 {
		t.Fatalf("retention: %+v, %v", p, err)
	}
	if _, err := s.GetDelivery(ctx, projectID, dlv); err == nil {
		t.Fatal("the delivery is still in the database after its day was dropped")
	}

	vars := map[string]string{"WEBHOOKD_ARCHIVE_DIR": dir, "WEBHOOKD_API_URL": "http://" + m.APIAddr, "WEBHOOKD_API_KEY": key}
	webhookdCLI := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli(ctx, args, env(vars), &out, &errOut)
		return out.String(), errOut.String(), code
	}

	out, errOut, code := webhookdCLI("archive", "list")
	if code != 0 || !regexp.MustCompile(`(?m)^legacy\s+\S+\s+\S+\s+\d+\s+1\s+1\s+1\s+ok$`).MatchString(out) {
		t.Fatalf("archive list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	show := func(id string) map[string]json.RawMessage {
		t.Helper()
		out, errOut, code := webhookdCLI("archive", "show", id)
		var got map[string]json.RawMessage
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("archive show %s: exit %d, stdout %q, stderr %q", id, code, out, errOut)
		}
		return got
	}
	idOf := func(raw json.RawMessage) string {
		var k struct {
			ID string `json:"id"`
		}
		json.Unmarshal(raw, &k)
		return k.ID
	}
	for _, id := range []string{dlv, dl} {
		got := show(id)
		var attempts []json.RawMessage
		json.Unmarshal(got["attempts"], &attempts)
		if idOf(got["delivery"]) != dlv || idOf(got["event"]) != evt || idOf(got["dead_letter"]) != dl || len(attempts) != 1 {
			t.Errorf("archive show %s: %s", id, got)
		}
	}
	if got := show(evt); idOf(got["event"]) != evt || !strings.Contains(string(got["deliveries"]), dlv) || !strings.Contains(string(got["attempts"]), dlv) {
		t.Errorf("archive show %s: %s", evt, got)
	}

	out, errOut, code = webhookdCLI("archive", "replay", dl)
	if code != 0 || !regexp.MustCompile(`^evt_[0-9A-Z]{26}\n$`).MatchString(out) {
		t.Fatalf("archive replay: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var typ, data, to string
	if err := m.DB.Pool().QueryRow(ctx, `SELECT e.type, e.data::text, d.endpoint_id FROM events e JOIN deliveries d ON d.event_id = e.id
		WHERE e.id = $1`, strings.TrimSpace(out)).Scan(&typ, &data, &to); err != nil {
		t.Fatal(err)
	}
	var gotData, wantData any
	json.Unmarshal([]byte(data), &gotData)
	json.Unmarshal([]byte(`{"order":7,"note":"a\\b"}`), &wantData)
	if typ != "order.paid" || !equalValues(gotData, wantData) || to != ep.ID {
		t.Errorf("replayed as %s %s to %s", typ, data, to)
	}

	unknownDL, unknownDLV := "dl_"+ulid.Make().String(), "dlv_"+ulid.Make().String()
	for _, args := range [][]string{{"archive", "show", unknownDLV}, {"archive", "show", unknownDL}, {"archive", "replay", unknownDL}} {
		out, errOut, code := webhookdCLI(args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "holds "+args[2]) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 naming the id", args, code, out, errOut)
		}
		checkErrorForm(t, args, errOut)
	}

	// A file changed after it was written no longer verifies.
	f, err := os.OpenFile(filepath.Join(dir, "legacy", archive.FileName("attempts")), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()
	out, errOut, code = webhookdCLI("archive", "list")
	if code != 1 || !regexp.MustCompile(`(?m)^legacy .*FAILED: .*attempts`).MatchString(out) || !strings.Contains(errOut, "do not verify") {
		t.Errorf("archive list of a changed file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func equalValues(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestReadyzSaysWhenTheArchiveFails: a worker whose WEBHOOKD_ARCHIVE_DIR
// cannot be written keeps the days due, says which in /readyz (still 200:
// deliveries go on) and counts the failure in /metrics.
func TestReadyzSaysWhenTheArchiveFails(t *testing.T) {
	t.Parallel()
	name, _ := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.RedisURL, cfg.DashboardAddr = testenv.DatabaseURL(), redisURL, "127.0.0.1:0"
	cfg.Retention, cfg.ArchiveDir = time.Nanosecond, filepath.Join(blocker, "archive")
	m := NewMain(cfg, io.Discard)
	m.SearchPath = name
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.OpenDB(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.DB.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Days from three days ago: those before today are past the retention.
	if err := m.DB.Store().StartDaysAt(ctx, time.Now().Add(-72*time.Hour), time.Now(), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, Roles{Worker: true, Ops: true, NoDashboard: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := httpGet("http://" + m.OpsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		return resp.code, resp.body
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/readyz")
		var r readiness
		json.Unmarshal([]byte(body), &r)
		if strings.HasPrefix(r.Archive, "failing: day p") {
			if code != 200 || strings.Contains(body, blocker) {
				t.Errorf("/readyz %d %s: want 200, and no path", code, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s: no archive failure named after 30s", code, body)
		}
		time.Sleep(50 * time.Millisecond) // poll
	}
	if _, body := get("/metrics"); !strings.Contains(body, `webhookd_archive_failures_total{stage="write"} 1`) {
		t.Errorf("/metrics does not count the failure:\n%s", grepLines(body, "archive"))
	}
	if days, err := m.DB.Store().Days(ctx); err != nil || len(days) < 4 {
		t.Errorf("days %+v, %v: want the days due kept", days, err)
	}
}

type response struct {
	code int
	body string
}

func httpGet(url string) (response, error) {
	resp, err := http.Get(url)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b)}, err
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
