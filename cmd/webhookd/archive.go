package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/client"
)

// archiveDir is the archive the archive commands read: WEBHOOKD_ARCHIVE_DIR
// alone, no database.
func archiveDir(inv *invocation) (string, error) {
	if inv.cfg.ArchiveDir == "" {
		return "", errors.New("no archive: set WEBHOOKD_ARCHIVE_DIR or --archive-dir")
	}
	return inv.cfg.ArchiveDir, nil
}

// archiveList is `webhookd archive list`: each archived day, oldest first,
// with its rows and whether its files verify against its manifest. A day
// that does not verify is a refusal (exit 1) once all are listed.
func archiveList(*flagSet) action {
	return func(ctx context.Context, inv *invocation) error {
		dir, err := archiveDir(inv)
		if err != nil {
			return err
		}
		days, err := archive.List(dir, true)
		if err != nil {
			return refusedError{err}
		}
		tw := tabwriter.NewWriter(inv.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DAY\tFROM\tTO\tEVENTS\tDELIVERIES\tATTEMPTS\tDEAD_LETTERS\tVERIFIED")
		bad := 0
		for _, d := range days {
			m, verified := d.Manifest, "ok"
			if d.Err != nil {
				verified, bad = "FAILED: "+d.Err.Error(), bad+1
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", m.Day, m.Lo.Format("2006-01-02T15:04Z"), m.Hi.Format("2006-01-02T15:04Z"),
				m.Files["events"].Rows, m.Files["deliveries"].Rows, m.Files["attempts"].Rows, m.Files["dead_letters"].Rows, verified)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if bad > 0 {
			return refusedError{fmt.Errorf("%d of %d days do not verify", bad, len(days))}
		}
		return nil
	}
}

// archiveShow is `webhookd archive show ID`: an archived delivery, event
// or dead letter, as JSON, with what goes with it. An id no day holds is
// a refusal (exit 1).
func archiveShow(*flagSet) action {
	return func(ctx context.Context, inv *invocation) error {
		r, err := findArchived(inv, inv.args[0])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(inv.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
}

// findArchived finds id in the archive; not found, or no archive there, is
// a refusal.
func findArchived(inv *invocation, id string) (archive.Record, error) {
	dir, err := archiveDir(inv)
	if err != nil {
		return archive.Record{}, err
	}
	r, err := archive.Find(dir, id)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		return r, refusedError{fmt.Errorf("no day in %s holds %s", dir, id)}
	case errors.Is(err, fs.ErrNotExist):
		return r, refusedError{err}
	case err != nil:
		return r, refusedError{err}
	}
	return r, nil
}

// archiveReplay is `webhookd archive replay DEAD_LETTER_ID`: the archived
// dead letter's event, its type and data, sent again through the API as a
// new event for the dead letter's endpoint alone; it prints the new event's
// id. The API refusing it (no such endpoint in the key's project, say) is
// a refusal with its code and message.
func archiveReplay(f *flagSet) action {
	var url, key = "http://127.0.0.1:8080", ""
	f.String(&url, "api-url", "WEBHOOKD_API_URL", secretURL, "the API's base `URL`")
	f.String(&key, "api-key", "WEBHOOKD_API_KEY", secret, "API `KEY`")
	return func(ctx context.Context, inv *invocation) error {
		id := inv.args[0]
		if !strings.HasPrefix(id, "dl_") {
			return usageError{cmd: "archive replay", err: fmt.Errorf("%q is not a dead letter's id (dl_...)", id)}
		}
		r, err := findArchived(inv, id)
		if err != nil {
			return err
		}
		var dl struct {
			EndpointID string `json:"endpoint_id"`
		}
		var ev struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(r.DeadLetter, &dl); err != nil || dl.EndpointID == "" {
			return refusedError{fmt.Errorf("%s: the archived dead letter names no endpoint", id)}
		}
		if len(r.Event) == 0 || json.Unmarshal(r.Event, &ev) != nil || ev.Type == "" {
			return refusedError{fmt.Errorf("%s: its event is not in the archive", id)}
		}
		if key == "" {
			return errors.New("no API key: set WEBHOOKD_API_KEY or --api-key")
		}
		c, err := client.New(url, key, client.WithUserAgent("webhookd-archive-replay"))
		if err != nil {
			return err
		}
		sent, err := c.SendEvent(ctx, client.NewEvent{Type: ev.Type, Data: ev.Data, EndpointIDs: []string{dl.EndpointID}})
		if err != nil {
			return apiRefusal(err)
		}
		fmt.Fprintln(inv.stdout, sent.ID)
		return nil
	}
}
