package dispatcher_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// archiveFixture is a database whose legacy day holds an event with two
// deliveries, one succeeded and one dead-lettered, each with an attempt
// whose headers carry credentials, and a retention two days ahead, so the
// legacy day (today's rows) is past its time.
type archiveFixture struct {
	db     *storage.DB
	secret string // the endpoints' signing secret
	leaks  []string
}

func newArchiveFixture(t *testing.T) *archiveFixture {
	t.Helper()
	db := testenv.DB(t)
	ctx := context.Background()
	s := db.Store()
	_, p, err := s.CreateAPIKey(ctx, "p", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	f := &archiveFixture{db: db, secret: "whsec_c2VjcmV0LXNpZ25pbmcta2V5LW5vdC1pbi1hcmNoaXZl"}
	for _, u := range []string{"http://127.0.0.1:9/a", "http://127.0.0.1:9/b"} {
		if _, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: u, Secret: f.secret}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: "invoice.paid",
		Data: json.RawMessage(`{"note":"back\\slash \"quoted\"\nnew line\ttab é ✓"}`)}}, time.Now(), func(int) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	f.leaks = []string{"Bearer sk_live_request_credential", "session=resp-cookie-value", "tok-in-x-auth-token", f.secret, "tok-in-url"}
	for i, d := range evs[0].Deliveries {
		tr := storage.Transition{Status: webhookd.DeliverySucceeded}
		if i == 1 {
			tr = storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted}
		}
		code := 200 + 300*i
		testenv.Record(t, db, d.ID, webhookd.Attempt{StatusCode: &code, URL: "http://127.0.0.1:9/a?Access_Token=tok-in-url&page=2",
			RequestHeaders:  map[string]string{"Authorization": f.leaks[0], "Webhook-Id": evs[0].ID, "Webhook-Signature": "v1,c2lnbmF0dXJl"},
			ResponseHeaders: map[string]string{"Set-Cookie": f.leaks[1], "X-Auth-Token": f.leaks[2], "Content-Type": "text/plain"}}, tr)
	}
	return f
}

// rows returns the rows of a partition as row_to_json gives them.
func (f *archiveFixture) rows(t *testing.T, partition, order string) []map[string]any {
	t.Helper()
	rs, err := f.db.Pool().Query(context.Background(), `SELECT row_to_json(t)::text FROM `+partition+` t ORDER BY `+order)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []map[string]any
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, decode(t, s))
	}
	return out
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v: %q", err, s)
	}
	return m
}

// archived returns the rows of a table's file of an archived day.
func archived(t *testing.T, dayDir, table string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dayDir, archive.FileName(table)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(gz)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, decode(t, sc.Text()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestRetentionArchivesADayThenDropsIt: with ArchiveDir, retention writes
// the day's four partitions there — every row as it was, the attempts'
// credentials (headers, URL query) redacted, no secret anywhere — with a manifest that
// verifies, and drops the day only then.
func TestRetentionArchivesADayThenDropsIt(t *testing.T) {
	t.Parallel()
	f := newArchiveFixture(t)
	ctx := context.Background()
	before := map[string][]map[string]any{
		"events":       f.rows(t, "events_legacy", "id"),
		"deliveries":   f.rows(t, "deliveries_legacy", "id"),
		"attempts":     f.rows(t, "attempts_legacy", "delivery_id, number"),
		"dead_letters": f.rows(t, "dead_letters_legacy", "delivery_id, id"),
	}
	if len(before["deliveries"]) != 2 || len(before["attempts"]) != 2 || len(before["dead_letters"]) != 1 {
		t.Fatalf("fixture: %+v", before)
	}
	dir := filepath.Join(t.TempDir(), "archive")
	var days atomic.Int32
	r := &dispatcher.Retention{DB: f.db, Keep: time.Nanosecond, Clock: aheadClock(48 * time.Hour),
		Logger: testLogger(t), ArchiveDir: dir, Archived: func() { days.Add(1) },
		ArchiveFailed: func(stage string) { t.Errorf("archive failed at %s", stage) }}
	ran, p, err := r.RunOnce(ctx)
	if err != nil || !ran || p.Days < 2 {
		t.Fatalf("ran %v, purged %+v, %v; want the legacy day and tomorrow's dropped", ran, p, err)
	}
	if int64(days.Load()) != p.Days || r.ArchiveStatus() != "ok" {
		t.Errorf("%d days archived, %d dropped, status %q", days.Load(), p.Days, r.ArchiveStatus())
	}
	left, err := f.db.Store().Days(ctx)
	if err != nil || len(left) == 0 || left[0].Suffix == "legacy" {
		t.Fatalf("days left %+v, %v; want the legacy day gone", left, err)
	}

	dayDir := filepath.Join(dir, "legacy")
	m, err := archive.Verify(dayDir)
	if err != nil {
		t.Fatal(err)
	}
	for table, want := range before {
		got := archived(t, dayDir, table)
		if m.Files[table].Rows != int64(len(want)) || len(got) != len(want) {
			t.Fatalf("%s: manifest %d rows, file %d, partition %d", table, m.Files[table].Rows, len(got), len(want))
		}
		for i := range want {
			if table == "attempts" {
				for _, h := range []string{"request_headers", "response_headers"} {
					wh, gh := want[i][h].(map[string]any), got[i][h].(map[string]any)
					for k, v := range wh {
						redacted := k == "Authorization" || k == "Set-Cookie" || k == "X-Auth-Token" || k == "Webhook-Signature"
						if redacted && gh[k] != "[redacted]" || !redacted && gh[k] != v {
							t.Errorf("attempt %d %s %s: %v in the archive, %v in the partition", i, h, k, gh[k], v)
						}
					}
					delete(want[i], h)
					delete(got[i], h)
				}
				if u := got[i]["url"]; u != "http://127.0.0.1:9/a?Access_Token=[redacted]&page=2" {
					t.Errorf("attempt %d url %v", i, u)
				}
				delete(want[i], "url")
				delete(got[i], "url")
			}
			if !equalJSON(got[i], want[i]) {
				t.Errorf("%s row %d:\narchived  %v\npartition %v", table, i, got[i], want[i])
			}
		}
	}
	// No credential and no secret in any file, compressed or not.
	for _, table := range archive.Tables {
		for _, row := range archived(t, dayDir, table) {
			b, _ := json.Marshal(row)
			for _, leak := range f.leaks {
				if strings.Contains(string(b), leak) {
					t.Errorf("%s holds %q: %s", table, leak, b)
				}
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != int(p.Days) {
		t.Errorf("archive dir holds %d entries, want %d days and no temporary directory", len(entries), p.Days)
	}
}

// TestRetentionKeepsADayItCannotArchive: an archive directory that cannot
// be written keeps the day whole, counts the failure and says so in
// ArchiveStatus; once it can be written, the next pass archives the day.
func TestRetentionKeepsADayItCannotArchive(t *testing.T) {
	t.Parallel()
	f := newArchiveFixture(t)
	ctx := context.Background()
	parent := t.TempDir()
	blocker := filepath.Join(parent, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		t.Helper()
		if err := f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries_legacy) + (SELECT count(*) FROM attempts_legacy)
			+ (SELECT count(*) FROM dead_letters_legacy) + (SELECT count(*) FROM events_legacy)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rows := count()
	var failures atomic.Int32
	r := &dispatcher.Retention{DB: f.db, Keep: time.Nanosecond, Clock: aheadClock(48 * time.Hour),
		Logger: testLogger(t), ArchiveDir: filepath.Join(blocker, "archive"),
		ArchiveFailed: func(stage string) {
			if stage != "write" {
				t.Errorf("failure at %s, want write", stage)
			}
			failures.Add(1)
		}}
	if _, p, err := r.RunOnce(ctx); err != nil || p.Days != 0 {
		t.Fatalf("purged %+v, %v; want no day dropped and no error", p, err)
	}
	if failures.Load() != 1 || !strings.HasPrefix(r.ArchiveStatus(), "failing: day legacy kept") {
		t.Errorf("%d failures counted, status %q", failures.Load(), r.ArchiveStatus())
	}
	if n := count(); n != rows {
		t.Fatalf("%d rows left in the legacy day, want all %d", n, rows)
	}

	r.ArchiveDir = filepath.Join(parent, "archive")
	if _, p, err := r.RunOnce(ctx); err != nil || p.Days < 1 || r.ArchiveStatus() != "ok" {
		t.Fatalf("with a writable dir: purged %+v, %v, status %q", p, err, r.ArchiveStatus())
	}
	if _, err := archive.Verify(filepath.Join(parent, "archive", "legacy")); err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test's output.
func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

// TestArchiveKeepsAWaitingDayWhole: with an archive, a day kept because a
// delivery of it waits is neither written nor purged row by row: its
// finished rows stay until the day can be archived whole.
func TestArchiveKeepsAWaitingDayWhole(t *testing.T) {
	t.Parallel()
	f := newArchiveFixture(t)
	ctx := context.Background()
	var project string
	if err := f.db.Pool().QueryRow(ctx, `SELECT id FROM projects`).Scan(&project); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Store().CreateEvents(ctx, project, []storage.NewEvent{{Type: "a", Data: json.RawMessage("1")}},
		time.Now(), func(int) string { return "" }); err != nil { // pending: it waits
		t.Fatal(err)
	}
	var before int
	if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM deliveries_legacy`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "archive")
	r := &dispatcher.Retention{DB: f.db, Keep: time.Nanosecond, Clock: aheadClock(48 * time.Hour),
		Logger: testLogger(t), ArchiveDir: dir}
	if _, p, err := r.RunOnce(ctx); err != nil || p.Deliveries != 0 {
		t.Fatalf("purged %+v, %v; want no delivery purged row by row", p, err)
	}
	var after int
	if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM deliveries_legacy`).Scan(&after); err != nil || after != before {
		t.Fatalf("%d deliveries left of %d (%v)", after, before, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "legacy")); !os.IsNotExist(err) {
		t.Errorf("the waiting day was archived: %v", err)
	}
	if r.ArchiveStatus() != "ok" {
		t.Errorf("status %q: a day that waits is no failure", r.ArchiveStatus())
	}
}
