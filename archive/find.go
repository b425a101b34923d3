package archive

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Record is one archived delivery with what goes with it, as the archive
// holds them: each row is the JSON object of its file.
type Record struct {
	Archive    string            `json:"archive"`     // the archive's ID
	Delivery   json.RawMessage   `json:"delivery"`    //
	Event      json.RawMessage   `json:"event"`       // null when no archive holds it
	Attempts   []json.RawMessage `json:"attempts"`    // oldest first
	DeadLetter json.RawMessage   `json:"dead_letter"` // null when the delivery did not become one
}

// ErrNotFound is returned by Find when no archive holds the id.
var ErrNotFound = errors.New("not found in any archive")

// ErrBadID is returned by Find for an id that is neither a delivery's
// (dlv_...) nor a dead letter's (dl_...).
var ErrBadID = errors.New("want a delivery id (dlv_...) or a dead letter id (dl_...)")

// Find looks for a delivery or a dead letter by id in the archives of
// dir, and returns the delivery with its event, attempts and dead letter.
// The archive whose range holds the id's time is read first (ids are
// ULIDs: they carry it), then the others, newest first. It returns
// ErrBadID or ErrNotFound (wrapped), or what kept it from reading an
// archive.
func Find(dir, id string) (Record, error) {
	prefix, table := "dlv_", "deliveries"
	if strings.HasPrefix(id, "dl_") {
		prefix, table = "dl_", "dead_letters"
	}
	u, err := ulid.ParseStrict(strings.TrimPrefix(id, prefix))
	if !strings.HasPrefix(id, prefix) || err != nil {
		return Record{}, fmt.Errorf("%q: %w", id, ErrBadID)
	}
	entries, err := List(dir, false)
	if err != nil {
		return Record{}, err
	}
	at := ulid.Time(u.Time())
	slices.SortStableFunc(entries, func(a, b Entry) int {
		ai, bi := covers(a, at), covers(b, at)
		switch {
		case ai && !bi:
			return -1
		case bi && !ai:
			return 1
		}
		return strings.Compare(filepath.Base(b.Dir), filepath.Base(a.Dir)) // newest first
	})
	for _, e := range entries {
		if e.Err != nil {
			continue
		}
		row, err := findRow(e.Dir, table, "id", id)
		if err != nil {
			return Record{}, err
		}
		if row == nil {
			continue
		}
		return completeRecord(e, entries, table, row)
	}
	return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
}

// covers reports whether e's range holds t.
func covers(e Entry, t time.Time) bool {
	return e.Err == nil && !t.Before(e.Manifest.From) && t.Before(e.Manifest.To)
}

// ids are the ids a row names.
type ids struct {
	ID         string `json:"id"`
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
}

// completeRecord fills in what goes with the row found in table of e: the
// delivery, its dead letter and attempts (which are always in the same
// archive as their delivery), and its event: in the same archive, or else
// first in the one whose range holds the event id's time, then in the
// others.
func completeRecord(e Entry, all []Entry, table string, row []byte) (Record, error) {
	r := Record{Archive: e.Manifest.ID, Attempts: []json.RawMessage{}}
	var found ids
	if err := json.Unmarshal(row, &found); err != nil {
		return r, fmt.Errorf("archive %s: %w", e.Manifest.ID, err)
	}
	deliveryID := found.ID
	if table == "dead_letters" {
		r.DeadLetter, deliveryID = row, found.DeliveryID
		d, err := findRow(e.Dir, "deliveries", "id", deliveryID)
		if err != nil {
			return r, err
		}
		r.Delivery = d
	} else {
		r.Delivery = row
		dl, err := findRow(e.Dir, "dead_letters", "delivery_id", deliveryID)
		if err != nil {
			return r, err
		}
		r.DeadLetter = dl
	}
	if r.Delivery == nil {
		return r, fmt.Errorf("archive %s: dead letter %s names delivery %s, which it does not hold", e.Manifest.ID, found.ID, deliveryID)
	}
	var d ids
	if err := json.Unmarshal(r.Delivery, &d); err != nil {
		return r, fmt.Errorf("archive %s: %w", e.Manifest.ID, err)
	}
	err := scanRows(e.Dir, "attempts", func(row []byte) (bool, error) {
		if !bytes.Contains(row, []byte(`"`+deliveryID+`"`)) {
			return true, nil
		}
		var a ids
		if err := json.Unmarshal(row, &a); err != nil {
			return false, err
		}
		if a.DeliveryID == deliveryID {
			r.Attempts = append(r.Attempts, bytes.Clone(row))
		}
		return true, nil
	})
	if err != nil {
		return r, fmt.Errorf("archive %s: %w", e.Manifest.ID, err)
	}
	candidates := []Entry{e}
	var at time.Time
	if u, err := ulid.ParseStrict(strings.TrimPrefix(d.EventID, "evt_")); err == nil {
		at = ulid.Time(u.Time())
	}
	for _, first := range []bool{true, false} {
		for _, other := range all {
			if covers(other, at) == first && other.Dir != e.Dir && other.Err == nil {
				candidates = append(candidates, other)
			}
		}
	}
	for _, other := range candidates {
		ev, err := findRow(other.Dir, "events", "id", d.EventID)
		if err != nil {
			return r, err
		}
		if ev != nil {
			r.Event = ev
			break
		}
	}
	return r, nil
}

// findRow returns a copy of the first row of table in the archive at dir
// whose field is value, or nil.
func findRow(dir, table, field, value string) (json.RawMessage, error) {
	var found json.RawMessage
	err := scanRows(dir, table, func(row []byte) (bool, error) {
		if !bytes.Contains(row, []byte(`"`+value+`"`)) {
			return true, nil
		}
		var got ids
		if err := json.Unmarshal(row, &got); err != nil {
			return false, err
		}
		if (field == "id" && got.ID == value) || (field == "delivery_id" && got.DeliveryID == value) {
			found = bytes.Clone(row)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", filepath.Base(dir), err)
	}
	return found, nil
}

// scanRows calls fn with each row of table's file in the archive at dir.
func scanRows(dir, table string, fn func(row []byte) (bool, error)) error {
	f, err := os.Open(filepath.Join(dir, fileName(table)))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := eachRow(f, fn); err != nil {
		return fmt.Errorf("%s: %w", fileName(table), err)
	}
	return nil
}
