package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/webhookd/webhookd/client"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// sendSetup is `webhookd send` (SPEC §7): it posts one event through the
// Go client and prints the event id alone on stdout. An --external-id sent
// before is the same event: send prints that event's id (the API names it
// in external_id_taken) and says on stderr that nothing new was sent, exit
// 0, so a script may run it again. A refused request, or an API it could
// not reach, is a refusal (exit 1) with the API's error code and message; a
// bad command line (no --type, --data that is not JSON) is a usage error
// (exit 2).
//
// With --bulk FILE (or - for standard input) it posts the file, NDJSON,
// one event per line, as a bulk job (POST /v1/events/bulk), streamed;
// prints the job id alone on stdout as soon as the API has stored the
// body, then follows the job on stderr (a progress bar on a terminal,
// plain lines otherwise), lists the lines it refused, and exits 0 once it
// succeeded, 1 when it failed or was canceled.
func sendSetup(f *flagSet) action {
	var (
		url        = "http://127.0.0.1:8080"
		key        string
		typ        string
		data       string
		externalID string
		idemKey    string
		endpoints  stringList
		bulkFile   string
	)
	f.String(&typ, "type", "", plain, "event `TYPE` (required)")
	f.String(&data, "data", "", plain, "event data: `JSON`, or @file.json, or @- for standard input (required)")
	f.String(&externalID, "external-id", "", plain, "external `ID`, unique per project")
	f.String(&bulkFile, "bulk", "", plain, "post this NDJSON `FILE` (- for standard input), one event per line, as a bulk job and follow it")
	f.Var(&endpoints, "endpoint", "send to this endpoint `ID` only (repeat for several)")
	f.String(&idemKey, "idempotency-key", "", plain, "Idempotency-Key `K` (default: a new UUID, reused on every retry)")
	f.String(&url, "api-url", "WEBHOOKD_API_URL", secretURL, "the API's base `URL`")
	f.String(&key, "api-key", "WEBHOOKD_API_KEY", secret, "API `KEY`")
	return func(ctx context.Context, inv *invocation) error {
		usage := func(format string, a ...any) error { return usageError{cmd: "send", err: fmt.Errorf(format, a...)} }
		if bulkFile != "" {
			if typ != "" || data != "" || externalID != "" || len(endpoints) > 0 {
				return usage("--bulk takes the events from its file: no --type, --data, --external-id or --endpoint")
			}
			if key == "" {
				return errors.New("no API key: set WEBHOOKD_API_KEY or --api-key")
			}
			return sendBulk(ctx, inv, url, key, bulkFile, idemKey)
		}
		switch {
		case typ == "":
			return usage("--type is required")
		case data == "":
			return usage("--data is required")
		}
		raw, err := readData(data)
		if err != nil {
			return usage("--data: %v", err)
		}
		if key == "" {
			return errors.New("no API key: set WEBHOOKD_API_KEY or --api-key")
		}
		c, opts, err := sendClient(url, key, idemKey)
		if err != nil {
			return err
		}
		ev, err := c.SendEvent(ctx, client.NewEvent{Type: typ, Data: raw, ExternalID: externalID, EndpointIDs: endpoints}, opts...)
		var apiErr *client.Error
		switch {
		case errors.Is(err, client.ErrExternalIDTaken) && errors.As(err, &apiErr) && apiErr.ExistingID != "":
			fmt.Fprintf(inv.stderr, "webhookd: send: external id %q was sent before, as %s; nothing new was sent\n",
				externalID, apiErr.ExistingID)
			fmt.Fprintln(inv.stdout, apiErr.ExistingID)
			return nil
		case errors.As(err, &apiErr):
			return apiRefusal(apiErr)
		case err != nil:
			return refusedError{err}
		}
		fmt.Fprintln(inv.stdout, ev.ID)
		return nil
	}
}

// apiRefusal is the refusedError of an API's error answer.
func apiRefusal(e *client.Error) error {
	msg := e.Code + ": " + e.Message
	if e.RequestID != "" {
		msg += " [" + e.RequestID + "]"
	}
	return refusedError{errors.New(msg)}
}

// sendClient is the client `webhookd send` calls the API with, and the
// options of its one call: the Idempotency-Key given, if any.
func sendClient(url, key, idemKey string) (*client.Client, []client.CallOption, error) {
	c, err := client.New(url, key, client.WithUserAgent("webhookd-send"))
	if err != nil {
		return nil, nil, err
	}
	var opts []client.CallOption
	if idemKey != "" {
		opts = append(opts, client.WithIdempotencyKey(idemKey))
	}
	return c, opts, nil
}

// sendBulk is `webhookd send --bulk FILE`.
func sendBulk(ctx context.Context, inv *invocation, url, key, file, idemKey string) error {
	in := io.Reader(os.Stdin)
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return usageError{cmd: "send", err: fmt.Errorf("--bulk: %w", err)}
		}
		defer f.Close()
		in = f
	}
	c, opts, err := sendClient(url, key, idemKey)
	if err != nil {
		return err
	}
	id, err := c.BulkNDJSON(ctx, in, opts...)
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		return apiRefusal(apiErr)
	case err != nil:
		return refusedError{err}
	}
	fmt.Fprintln(inv.stdout, id)
	bar := isTerminal(inv.stderr)
	j, err := c.WaitJob(ctx, id, 500*time.Millisecond, func(j client.Job) {
		if bar {
			fmt.Fprintf(inv.stderr, "\r%s", progressBar(j))
			return
		}
		fmt.Fprintf(inv.stderr, "webhookd: send: job %s %s: %d of %d accepted, %d refused\n", j.ID, j.Status, j.Done, j.Total, j.FailedCount)
	})
	if bar {
		fmt.Fprintln(inv.stderr)
	}
	if err != nil {
		return refusedError{err}
	}
	if j.FailedCount > 0 {
		errs, err := c.JobErrors(ctx, id)
		if err != nil {
			return refusedError{err}
		}
		for _, e := range errs {
			fmt.Fprintf(inv.stderr, "webhookd: send: line %d refused: %s: %s\n", e.Line, e.Code, e.Message)
		}
	}
	if j.Status != "succeeded" {
		return refusedError{fmt.Errorf("job %s %s", j.ID, j.Status)}
	}
	return nil
}

// progressBar draws a job's progress on one line of a terminal.
func progressBar(j client.Job) string {
	const width = 30
	n := j.Done + j.FailedCount
	filled := width
	if j.Total > 0 {
		filled = min(width, width*n/j.Total)
	}
	return fmt.Sprintf("[%s%s] %d/%d accepted, %d refused (%s)", strings.Repeat("#", filled),
		strings.Repeat(".", width-filled), j.Done, j.Total, j.FailedCount, j.Status)
}

// readData reads --data: inline JSON, @path, or @- for standard input.
func readData(v string) (json.RawMessage, error) {
	b := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if name == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, err
		}
	}
	if !json.Valid(b) {
		return nil, errors.New("not valid JSON")
	}
	return json.RawMessage(b), nil
}
