package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/archive"
	"github.com/webhookd/webhookd/client"
)

// archiveSettings are the settings of `archive list` and `archive show`:
// the archive alone, no database.
var archiveSettings = []string{"archive-dir", "log-level", "log-format"}

// archiveDir is WEBHOOKD_ARCHIVE_DIR as a command needs it: set, and a
// directory. Either failing is a usage error (exit 2).
func archiveDir(inv *invocation, cmd string) (string, error) {
	dir := inv.cfg.ArchiveDir
	if dir == "" {
		return "", usageError{cmd: cmd, err: errors.New("no archive directory: set WEBHOOKD_ARCHIVE_DIR or --archive-dir")}
	}
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return "", usageError{cmd: cmd, err: fmt.Errorf("WEBHOOKD_ARCHIVE_DIR %s: %w", dir, err)}
	}
	return dir, nil
}

// archiveList is `webhookd archive list`: every archive of the
// directory, oldest first, each verified (sizes, digests, row counts).
// It exits 1 when one fails verification, naming it and why on stderr.
func archiveList(*flagSet) action {
	return func(ctx context.Context, inv *invocation) error {
		dir, err := archiveDir(inv, "archive list")
		if err != nil {
			return err
		}
		entries, err := archive.List(dir, true)
		if err != nil {
			return usageError{cmd: "archive list", err: err}
		}
		w := tabwriter.NewWriter(inv.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tFROM\tTO\tEVENTS\tDELIVERIES\tATTEMPTS\tDEAD_LETTERS\tBYTES\tVERIFIED")
		var bad []string
		for _, e := range entries {
			m, verified := e.Manifest, "yes"
			if e.Err != nil {
				verified = "NO"
				bad = append(bad, e.Err.Error())
			}
			id := m.ID
			if id == "" {
				id = e.Dir
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", id, timeOrDash(m.From), timeOrDash(m.To),
				m.Rows("events"), m.Rows("deliveries"), m.Rows("attempts"), m.Rows("dead_letters"), m.Bytes(), verified)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(bad) > 0 {
			return refusedError{fmt.Errorf("%d of %d archives failed verification: %s", len(bad), len(entries), strings.Join(bad, "; "))}
		}
		return nil
	}
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// archiveShow is `webhookd archive show ID`: the archived delivery (by its
// id or its dead letter's) with its event, attempts and dead letter, as
// JSON, from the archive alone.
func archiveShow(*flagSet) action {
	return func(ctx context.Context, inv *invocation) error {
		dir, err := archiveDir(inv, "archive show")
		if err != nil {
			return err
		}
		r, err := findArchived(dir, inv.args[0], "archive show")
		if err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = inv.stdout.Write(out.Bytes())
		return err
	}
}

// findArchived is archive.Find with its errors as the CLI's: a bad id a
// usage error, one no archive holds a refusal.
func findArchived(dir, id, cmd string) (archive.Record, error) {
	r, err := archive.Find(dir, id)
	switch {
	case errors.Is(err, archive.ErrBadID):
		return r, usageError{cmd: cmd, err: err}
	case errors.Is(err, archive.ErrNotFound):
		return r, refusedError{fmt.Errorf("%w in %s", err, dir)}
	}
	return r, err
}

// archivedEvent and archivedDeadLetter are the fields replay reads.
type archivedEvent struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

type archivedDeadLetter struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
}

// archiveReplaySetup is `webhookd archive replay DEAD_LETTER_ID`: the
// archived event of the dead letter, sent again to its endpoint alone as a
// new event through the API (WEBHOOKD_API_URL, WEBHOOKD_API_KEY), with an
// Idempotency-Key made from the dead letter's id, so that running it twice
// sends once (within the project's idempotency TTL). The endpoint is
// looked up first: one that no longer exists, or is disabled, is a
// refusal and nothing is sent.
func archiveReplaySetup(f *flagSet) action {
	url, key := "http://127.0.0.1:8080", ""
	f.String(&url, "api-url", "WEBHOOKD_API_URL", secretURL, "the API's base `URL`")
	f.String(&key, "api-key", "WEBHOOKD_API_KEY", secret, "API `KEY` of the dead letter's project")
	return func(ctx context.Context, inv *invocation) error {
		const cmd = "archive replay"
		id := inv.args[0]
		if !strings.HasPrefix(id, "dl_") {
			return usageError{cmd: cmd, err: fmt.Errorf("%q is not a dead letter id (dl_...)", id)}
		}
		dir, err := archiveDir(inv, cmd)
		if err != nil {
			return err
		}
		if key == "" {
			return usageError{cmd: cmd, err: errors.New("no API key: set WEBHOOKD_API_KEY or --api-key")}
		}
		r, err := findArchived(dir, id, cmd)
		if err != nil {
			return err
		}
		var dl archivedDeadLetter
		var ev archivedEvent
		if err := json.Unmarshal(r.DeadLetter, &dl); err != nil {
			return fmt.Errorf("archive %s: dead letter %s: %w", r.Archive, id, err)
		}
		if r.Event == nil {
			return refusedError{fmt.Errorf("archive %s holds dead letter %s but not its event: nothing to send", r.Archive, id)}
		}
		if err := json.Unmarshal(r.Event, &ev); err != nil {
			return fmt.Errorf("archive %s: event of %s: %w", r.Archive, id, err)
		}
		c, err := client.New(url, key, client.WithUserAgent("webhookd-archive-replay"))
		if err != nil {
			return usageError{cmd: cmd, err: err}
		}
		if err := replayableEndpoint(ctx, c, dl.EndpointID); err != nil {
			return err
		}
		sent, err := c.SendEvent(ctx, client.NewEvent{Type: ev.Type, Data: ev.Data, EndpointIDs: []string{dl.EndpointID}},
			client.WithIdempotencyKey("archive-replay-"+dl.ID))
		var apiErr *client.Error
		switch {
		case errors.As(err, &apiErr):
			return apiRefusal(apiErr)
		case err != nil:
			return refusedError{err}
		case len(sent.Deliveries) == 0:
			return refusedError{fmt.Errorf("event %s was accepted, but endpoint %s took no delivery (disabled meanwhile?)", sent.ID, dl.EndpointID)}
		}
		fmt.Fprintf(inv.stdout, "replayed %s (event %s) as event %s: delivery %s to %s\n", dl.ID, ev.ID, sent.ID,
			sent.Deliveries[0].ID, dl.EndpointID)
		return nil
	}
}

// replayableEndpoint refuses an endpoint that no longer exists (deleted,
// or not of the API key's project) or is disabled, in words that say so.
func replayableEndpoint(ctx context.Context, c *client.Client, id string) error {
	ep, err := c.Endpoint(ctx, id)
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrNotFound):
		return refusedError{fmt.Errorf("endpoint %s no longer exists (or is not in the API key's project): nothing was sent", id)}
	case errors.As(err, &apiErr):
		return apiRefusal(apiErr)
	case err != nil:
		return refusedError{err}
	case ep.Status != webhookd.EndpointActive:
		return refusedError{fmt.Errorf("endpoint %s is %s: enable it to replay; nothing was sent", id, ep.Status)}
	}
	return nil
}
