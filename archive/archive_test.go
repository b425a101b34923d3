package archive_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/webhookd/webhookd/archive"
)

// writeDay archives a day of rows: an event, a delivery of it with an
// attempt and a dead letter, all of the day's time.
func writeDay(t *testing.T, dir string, lo time.Time, note string) (evt, dlv, dl string) {
	t.Helper()
	at := ulid.Timestamp(lo.Add(time.Hour))
	evt, dlv = "evt_"+ulid.MustNew(at, ulid.DefaultEntropy()).String(), "dlv_"+ulid.MustNew(at, ulid.DefaultEntropy()).String()
	dl = "dl_" + ulid.Make().String()
	w, err := archive.Create(dir, "p"+lo.Format("20060102"), lo, lo.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for _, table := range archive.Tables {
		tw, err := w.Table(table)
		if err != nil {
			t.Fatal(err)
		}
		var line string
		switch table {
		case "events":
			line = fmt.Sprintf(`{"id":%q,"type":"a","data":{"note":%q}}`, evt, note)
		case "deliveries":
			line = fmt.Sprintf(`{"id":%q,"event_id":%q,"endpoint_id":"ep_1"}`, dlv, evt)
		case "attempts":
			line = fmt.Sprintf(`{"delivery_id":%q,"number":1}`, dlv)
		case "dead_letters":
			line = fmt.Sprintf(`{"id":%q,"delivery_id":%q,"event_id":%q,"endpoint_id":"ep_1"}`, dl, dlv, evt)
		}
		io.WriteString(tw, line+"\n")
	}
	if _, err := w.Commit(time.Now()); err != nil {
		t.Fatal(err)
	}
	return evt, dlv, dl
}

// TestWriteFindVerify: a day written is complete and verifies; a day
// written again replaces it; a writer that stops before Commit leaves
// nothing a reader sees; ids are found in their day, and a changed file
// no longer verifies.
func TestWriteFindVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	day1 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	writeDay(t, dir, day1, "first")
	evt, dlv, dl := writeDay(t, dir, day1, "again")
	evt2, _, dl2 := writeDay(t, dir, day1.Add(24*time.Hour), "next day")

	w, err := archive.Create(dir, "p20261123", day1, day1)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := w.Table("events")
	io.WriteString(tw, `{"id":"evt_x"}`+"\n")
	w.Abort()

	days, err := archive.List(dir, true)
	if err != nil || len(days) != 2 || days[0].Manifest.Day != "p20261120" || days[1].Err != nil {
		t.Fatalf("days %+v, %v", days, err)
	}
	if f := days[0].Manifest.Files["events"]; f.Rows != 1 || f.Bytes == 0 || len(f.SHA256) != 64 {
		t.Errorf("manifest of events %+v", f)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("%d entries in the archive, want the 2 days alone", len(entries))
	}

	for id, want := range map[string]string{evt: "again", dlv: "again", dl: "again", evt2: "next day", dl2: "next day"} {
		r, err := archive.Find(dir, id)
		if err != nil || !strings.Contains(string(r.Event), want) || (id != evt && id != evt2 && len(r.Attempts) != 1) {
			t.Errorf("Find(%s) = %+v, %v; want the event noted %q", id, r, err, want)
		}
	}
	for _, id := range []string{"dlv_" + ulid.Make().String(), "dl_" + ulid.Make().String(), "evt_nope", "ep_1"} {
		if _, err := archive.Find(dir, id); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("Find(%s): %v, want ErrNotFound", id, err)
		}
	}

	name := filepath.Join(dir, "p20261121", archive.FileName("dead_letters"))
	b, _ := os.ReadFile(name)
	b[len(b)/2] ^= 1
	os.WriteFile(name, b, 0o640)
	if _, err := archive.Verify(filepath.Join(dir, "p20261121")); err == nil {
		t.Error("a changed file verifies")
	}
}
