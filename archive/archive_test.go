package archive_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// Values that must never reach an archive.
const (
	endpointSecret = "whsec_QXJjaGl2ZVRlc3RTZWNyZXRLZXlOZXZlcg=="
	signature      = "v1,SIGNATUREbXVzdE5vdEJlQXJjaGl2ZWQ="
	cookie         = "session=COOKIEdGhlUmVjZWl2ZXJzU2Vzc2lvbg"
	pathToken      = "PATHTOKENc2xhY2tTdHlsZQ"
	queryToken     = "QUERYTOKENcXVlcnlTZWNyZXQ"
)

// day is the day the tests archive.
var day = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// history is a day of a project's history: a delivery that succeeded at
// its second attempt, and one that became a dead letter at its first
// (with the operational event webhookd.delivery.dead_lettered it made);
// and an event on each side of the day, which the day's archive leaves
// out.
type history struct {
	db                        *storage.DB
	apiKey                    string
	endpointID                string
	succeeded, deadDelivery   string
	deadLetterID, deadEventID string
}

func populate(t *testing.T) history {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t)
	s := db.Store()
	key, p, err := s.CreateAPIKey(ctx, "archive", storage.ProjectPlan{})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{
		URL: "http://127.0.0.1:9/hooks/" + pathToken + "?token=" + queryToken, Secret: endpointSecret}, day)
	if err != nil {
		t.Fatal(err)
	}
	h := history{db: db, apiKey: key, endpointID: ep.ID}
	event := func(at time.Time, typ string) webhookd.Event {
		evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: typ, Data: json.RawMessage(`{"n":1}`)}}, at,
			func(int) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return evs[0]
	}
	attempt := func(status int) webhookd.Attempt {
		return webhookd.Attempt{StatusCode: &status, URL: ep.URL, DurationMS: 12,
			RequestHeaders:  map[string]string{"Content-Type": "application/json", "Webhook-Signature": signature},
			ResponseHeaders: map[string]string{"Set-Cookie": cookie, "Content-Type": "text/plain"},
			ResponseBody:    `{"echo":{"Webhook-Signature":"` + signature + `"}}`} // a receiver that echoes its request
	}
	event(day.Add(-time.Minute), "before.day")
	event(day.Add(24*time.Hour), "after.day")

	ok := event(day.Add(time.Hour), "invoice.paid")
	h.succeeded = ok.Deliveries[0].ID
	retry := day.Add(time.Hour + time.Minute)
	testenv.Record(t, db, h.succeeded, attempt(500), storage.Transition{Status: webhookd.DeliveryRetrying,
		NextAttemptAt: &retry, Now: day.Add(time.Hour)})
	testenv.Record(t, db, h.succeeded, attempt(200), storage.Transition{Status: webhookd.DeliverySucceeded, Now: retry})

	dead := event(day.Add(2*time.Hour), "invoice.failed")
	h.deadDelivery, h.deadEventID = dead.Deliveries[0].ID, dead.ID
	testenv.Record(t, db, h.deadDelivery, attempt(400), storage.Transition{Status: webhookd.DeliveryDeadLetter,
		DeadLetterReason: webhookd.ReasonClientError, Now: day.Add(2 * time.Hour)})
	if err := db.Pool().QueryRow(ctx, `SELECT id FROM dead_letters WHERE delivery_id = $1`, h.deadDelivery).Scan(&h.deadLetterID); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestArchiveWriteVerifyFind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := populate(t)
	dir := t.TempDir()
	m, err := archive.Write(ctx, h.db, dir, day, day.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"events": 3, "deliveries": 2, "attempts": 3, "dead_letters": 1}
	for table, n := range want {
		if m.Rows(table) != n {
			t.Errorf("%s: %d rows, want %d", table, m.Rows(table), n)
		}
	}
	if m.ID != "20260301T000000Z-20260302T000000Z" || m.Format != archive.FormatVersion || m.Bytes() <= 0 {
		t.Fatalf("manifest %+v", m)
	}
	onDisk, err := archive.ReadManifest(filepath.Join(dir, m.ID))
	if err != nil || onDisk.ID != m.ID || len(onDisk.Files) != 4 || onDisk.Files[2] != m.Files[2] {
		t.Fatalf("manifest on disk %+v, %v", onDisk, err)
	}
	if err := archive.Verify(filepath.Join(dir, m.ID), m); err != nil {
		t.Fatal(err)
	}

	// No secret anywhere in it: every file decompressed, and the manifest.
	all := readArchive(t, filepath.Join(dir, m.ID))
	var stored string // the endpoint's secret as the database holds it
	if err := h.db.Pool().QueryRow(ctx, `SELECT secret FROM endpoints WHERE id = $1`, h.endpointID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{endpointSecret, stored, signature, cookie, pathToken, queryToken, h.apiKey} {
		if strings.Contains(all, secret) {
			t.Errorf("the archive holds the secret %q", secret)
		}
	}
	for _, kept := range []string{`"origin" : "http://127.0.0.1:9"`, `"Content-Type"`, `"data" : {"n":1}`, h.endpointID} {
		if !strings.Contains(all, kept) {
			t.Errorf("the archive lacks %s:\n%s", kept, all)
		}
	}

	// show: a delivery, and a dead letter with its attempts, by id alone.
	r, err := archive.Find(dir, h.succeeded)
	if err != nil || r.Archive != m.ID || len(r.Attempts) != 2 || r.Event == nil || r.DeadLetter != nil {
		t.Fatalf("find %s: %+v, %v", h.succeeded, r, err)
	}
	r, err = archive.Find(dir, h.deadLetterID)
	if err != nil || len(r.Attempts) != 1 || r.DeadLetter == nil || !bytes.Contains(r.Delivery, []byte(h.deadDelivery)) ||
		!bytes.Contains(r.Event, []byte(h.deadEventID)) {
		t.Fatalf("find %s: %+v, %v", h.deadLetterID, r, err)
	}
	if _, err := archive.Find(dir, "dlv_01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("find an id no archive holds: %v", err)
	}
	if _, err := archive.Find(dir, "evt_01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, archive.ErrBadID) {
		t.Fatalf("find an event id: %v", err)
	}

	// An archive is never overwritten.
	if _, err := archive.Write(ctx, h.db, dir, day, day.Add(24*time.Hour)); !errors.Is(err, archive.ErrExists) {
		t.Fatalf("a second write of the range: %v", err)
	}

	// A byte changed: Verify names the file, and List says so.
	path := filepath.Join(dir, m.ID, "attempts.ndjson.gz")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	err = archive.Verify(filepath.Join(dir, m.ID), m)
	if err == nil || !strings.Contains(err.Error(), "attempts.ndjson.gz") || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("verify a corrupted archive: %v", err)
	}
	list, err := archive.List(dir, true)
	if err != nil || len(list) != 1 || list[0].Err == nil {
		t.Fatalf("list: %+v, %v", list, err)
	}
}

// readArchive returns every file of the archive in dir, decompressed, and
// its manifest, as one text.
func readArchive(t *testing.T, dir string) string {
	t.Helper()
	var all strings.Builder
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		f, err := os.Open(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(de.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := io.Copy(&all, r); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return all.String()
}

// failingSource gives a few rows, then fails, as a database that goes
// away in the middle of a write would.
type failingSource struct{}

func (failingSource) ArchiveRows(_ context.Context, _, _ time.Time, fn func(string, []byte) error) error {
	if err := fn("events", []byte(`{"id":"evt_1"}`)); err != nil {
		return err
	}
	return errors.New("connection reset")
}

func TestArchiveFailedWriteLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	a, err := archive.NewArchiver(archive.Config{Dir: dir, Source: failingSource{}, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Archive(context.Background(), day, day.Add(24*time.Hour)); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("archive from a failing source: %v", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil || len(des) != 0 {
		t.Fatalf("left behind: %v, %v", des, err)
	}
	// /readyz says it fails, without the database's own words (they may
	// name a host): those are in the log.
	if s := a.Status(); s.State != "failing" || s.Since.IsZero() || strings.Contains(s.Error, "connection reset") ||
		!strings.Contains(s.Error, "database") {
		t.Fatalf("status %+v", s)
	}
	// A write cut short by a crash leaves its dot-directory: not an archive,
	// and removed by a later write of the range once it is hours old.
	stale, fresh := filepath.Join(dir, ".20260301T000000Z-20260302T000000Z.tmp-1"), filepath.Join(dir, ".20260301T000000Z-20260302T000000Z.tmp-2")
	for _, p := range []string{stale, fresh} {
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(stale, time.Now().Add(-7*time.Hour), time.Now().Add(-7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if list, err := archive.List(dir, true); err != nil || len(list) != 0 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	a.Archive(context.Background(), day, day.Add(24*time.Hour))
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stale temporary directory was kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("a recent temporary directory (a write under way) was removed: %v", err)
	}
	if n := metricValue(t, reg, "webhookd_archive_failures_total"); n != 2 {
		t.Fatalf("failures counted %v", n)
	}
	if _, err := a.Archive(context.Background(), day, day); err == nil {
		t.Fatal("an empty range was archived")
	}
}

// TestArchiverSuccess: a verified write sets the last success time, and
// the same range again (a retention job cut short after its write) is the
// archive already there, not a failure.
func TestArchiverSuccess(t *testing.T) {
	t.Parallel()
	h := populate(t)
	reg := prometheus.NewRegistry()
	a, err := archive.NewArchiver(archive.Config{Dir: t.TempDir(), Source: h.db, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Status(); s.State != "idle" || !s.Since.IsZero() {
		t.Fatalf("status before a write: %+v", s)
	}
	for range 2 {
		m, err := a.Archive(context.Background(), day, day.Add(24*time.Hour))
		if err != nil || m.Rows("deliveries") != 2 {
			t.Fatalf("archive: %+v, %v", m, err)
		}
	}
	if at := metricValue(t, reg, "webhookd_archive_last_success_timestamp_seconds"); at < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last success %v", at)
	}
	if n := metricValue(t, reg, "webhookd_archive_failures_total"); n != 0 {
		t.Fatalf("failures %v", n)
	}
	if s := a.Status(); s.State != "ok" || s.Error != "" {
		t.Fatalf("status after a write: %+v", s)
	}
}

// metricValue is the value of the counter or gauge named name in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestArchiveFindsTheEventInItsOwnArchive: a delivery made on the day after
// its event is archived with its event, in the archive of the event's day:
// ranges go by the time of ids, and a delivery's id carries its event's
// (the day partition both are in, migration 25).
func TestArchiveFindsTheEventInItsOwnArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := populate(t)
	next := day.Add(24 * time.Hour)
	if _, err := h.db.Pool().Exec(ctx, `UPDATE deliveries SET created_at = $2::timestamptz, updated_at = $2::timestamptz + interval '1 minute' WHERE id = $1`,
		h.succeeded, next.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, from := range []time.Time{day, next} {
		if _, err := archive.Write(ctx, h.db, dir, from, from.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := archive.Find(dir, h.succeeded)
	if err != nil || r.Archive != archive.ID(day, day.Add(24*time.Hour)) || r.Event == nil || len(r.Attempts) != 2 {
		t.Fatalf("find %s: %+v, %v", h.succeeded, r, err)
	}
}

// rowsSource gives fixed rows, as a database would.
type rowsSource map[string][]string

func (s rowsSource) ArchiveRows(_ context.Context, _, _ time.Time, fn func(string, []byte) error) error {
	for _, table := range []string{"events", "deliveries", "attempts", "dead_letters"} {
		for _, row := range s[table] {
			if err := fn(table, []byte(row)); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestArchiveLongRows: a row longer than any buffer (an event of 300 KiB
// of data, as a raised WEBHOOKD_MAX_PAYLOAD_BYTES allows) is written,
// verified and found whole.
func TestArchiveLongRows(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 300<<10)
	src := rowsSource{
		"events":     {`{"id":"evt_01M91J67E1SK4AK6ZT5SVG7JBG","data":{"s":"` + big + `"}}`},
		"deliveries": {`{"id":"dlv_01M91J67E1SK4AK6ZT5WQB41C4","event_id":"evt_01M91J67E1SK4AK6ZT5SVG7JBG"}`},
	}
	dir := t.TempDir()
	m, err := archive.Write(context.Background(), src, dir, day, day.Add(24*time.Hour))
	if err != nil || m.Rows("events") != 1 || m.Rows("attempts") != 0 {
		t.Fatalf("write: %+v, %v", m, err)
	}
	r, err := archive.Find(dir, "dlv_01M91J67E1SK4AK6ZT5WQB41C4")
	if err != nil || len(r.Event) != len(src["events"][0]) || len(r.Attempts) != 0 || r.DeadLetter != nil {
		t.Fatalf("find: %d bytes of event, %v", len(r.Event), err)
	}
}
