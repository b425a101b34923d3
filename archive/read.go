package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/oklog/ulid/v2"
)

// ErrNotFound is what Find answers for an id no archived day holds.
var ErrNotFound = errors.New("not in the archive")

// Day is one archived day as List finds it.
type Day struct {
	Dir      string
	Manifest Manifest
	Err      error // why its files do not verify; nil when they do
}

// List returns the days archived under dir, oldest first, each verified
// (Verify) when verify is set. Directories being written (their names
// start with a dot) are not days yet.
func List(dir string, verify bool) ([]Day, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var days []Day
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		d := Day{Dir: filepath.Join(dir, e.Name())}
		if verify {
			d.Manifest, d.Err = Verify(d.Dir)
		} else {
			d.Manifest, d.Err = ReadManifest(d.Dir)
		}
		if d.Manifest.Day == "" {
			d.Manifest.Day = e.Name()
		}
		days = append(days, d)
	}
	slices.SortFunc(days, func(a, b Day) int { return a.Manifest.Hi.Compare(b.Manifest.Hi) })
	return days, nil
}

// Record is what Find found: a dead letter, a delivery or an event, with
// what goes with it, each row as it was archived.
type Record struct {
	Day        string            `json:"day"`
	DeadLetter json.RawMessage   `json:"dead_letter,omitempty"`
	Delivery   json.RawMessage   `json:"delivery,omitempty"`
	Event      json.RawMessage   `json:"event,omitempty"`
	Deliveries []json.RawMessage `json:"deliveries,omitempty"` // an event's
	Attempts   []json.RawMessage `json:"attempts"`
}

// keys are the ids of a row of any of the four tables.
type keys struct {
	ID         string `json:"id"`
	EventID    string `json:"event_id"`
	DeliveryID string `json:"delivery_id"`
}

// Find finds an archived delivery (dlv_), event (evt_) or dead letter
// (dl_) by id under dir. A delivery's or an event's id carries its time,
// which names its day; a dead letter is looked for in every day, newest
// first. ErrNotFound when no day holds it.
func Find(dir, id string) (Record, error) {
	days, err := List(dir, false)
	if err != nil {
		return Record{}, err
	}
	prefix, raw, _ := strings.Cut(id, "_")
	switch prefix {
	case "dlv", "evt":
		u, err := ulid.ParseStrict(raw)
		if err != nil {
			return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		t := ulid.Time(u.Time())
		for _, d := range days {
			if d.Err == nil && !t.Before(d.Manifest.Lo) && t.Before(d.Manifest.Hi) {
				if prefix == "dlv" {
					return findDelivery(d, id)
				}
				return findEvent(d, id)
			}
		}
	case "dl":
		for _, d := range slices.Backward(days) {
			if d.Err != nil {
				continue
			}
			rows, err := scan(d.Dir, "dead_letters", id, func(k keys) bool { return k.ID == id })
			if err != nil {
				return Record{}, err
			}
			if len(rows) == 0 {
				continue
			}
			var k keys
			json.Unmarshal(rows[0], &k)
			r, err := findDelivery(d, k.DeliveryID)
			r.DeadLetter = rows[0]
			if errors.Is(err, ErrNotFound) { // a dead letter kept without its delivery: show what there is
				err = nil
			}
			return r, err
		}
	}
	return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
}

// findDelivery finds a delivery of day d with its event, attempts and
// dead letter.
func findDelivery(d Day, id string) (Record, error) {
	r := Record{Day: d.Manifest.Day, Attempts: []json.RawMessage{}}
	rows, err := scan(d.Dir, "deliveries", id, func(k keys) bool { return k.ID == id })
	if err != nil || len(rows) == 0 {
		return r, errors.Join(err, fmt.Errorf("%s: %w", id, ErrNotFound))
	}
	r.Delivery = rows[0]
	var k keys
	json.Unmarshal(rows[0], &k)
	if rows, err = scan(d.Dir, "events", k.EventID, func(e keys) bool { return e.ID == k.EventID }); err != nil {
		return r, err
	} else if len(rows) > 0 {
		r.Event = rows[0]
	}
	if r.Attempts, err = scan(d.Dir, "attempts", id, func(a keys) bool { return a.DeliveryID == id }); err != nil {
		return r, err
	}
	rows, err = scan(d.Dir, "dead_letters", id, func(dl keys) bool { return dl.DeliveryID == id })
	if len(rows) > 0 {
		r.DeadLetter = rows[0]
	}
	return r, err
}

// findEvent finds an event of day d with its deliveries and their
// attempts.
func findEvent(d Day, id string) (Record, error) {
	r := Record{Day: d.Manifest.Day, Attempts: []json.RawMessage{}}
	rows, err := scan(d.Dir, "events", id, func(k keys) bool { return k.ID == id })
	if err != nil || len(rows) == 0 {
		return r, errors.Join(err, fmt.Errorf("%s: %w", id, ErrNotFound))
	}
	r.Event = rows[0]
	if r.Deliveries, err = scan(d.Dir, "deliveries", id, func(k keys) bool { return k.EventID == id }); err != nil {
		return r, err
	}
	ids := map[string]bool{}
	for _, row := range r.Deliveries {
		var k keys
		json.Unmarshal(row, &k)
		ids[k.ID] = true
	}
	if len(ids) > 0 {
		r.Attempts, err = scan(d.Dir, "attempts", "", func(a keys) bool { return ids[a.DeliveryID] })
	}
	return r, err
}

// scan returns the rows of a day's table that match, in the file's order.
// A line that does not contain needle (when given) is not decoded.
func scan(dayDir, table, needle string, match func(keys) bool) ([]json.RawMessage, error) {
	f, err := os.Open(filepath.Join(dayDir, FileName(table)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	br := bufio.NewReaderSize(gz, 64<<10)
	out := []json.RawMessage{}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && (needle == "" || bytes.Contains(line, []byte(needle))) {
			var k keys
			if jerr := json.Unmarshal(line, &k); jerr != nil {
				return nil, fmt.Errorf("%s: %w", f.Name(), jerr)
			}
			if match(k) {
				out = append(out, json.RawMessage(bytes.TrimRight(line, "\n")))
			}
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
}
