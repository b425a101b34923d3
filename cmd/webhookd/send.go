package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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
func sendSetup(f *flagSet) action {
	var (
		url        = "http://127.0.0.1:8080"
		key        string
		typ        string
		data       string
		externalID string
		idemKey    string
		endpoints  stringList
	)
	f.String(&typ, "type", "", plain, "event `TYPE` (required)")
	f.String(&data, "data", "", plain, "event data: `JSON`, or @file.json, or @- for standard input (required)")
	f.String(&externalID, "external-id", "", plain, "external `ID`, unique per project")
	f.Var(&endpoints, "endpoint", "send to this endpoint `ID` only (repeat for several)")
	f.String(&idemKey, "idempotency-key", "", plain, "Idempotency-Key `K` (default: a new UUID, reused on every retry)")
	f.String(&url, "api-url", "WEBHOOKD_API_URL", secretURL, "the API's base `URL`")
	f.String(&key, "api-key", "WEBHOOKD_API_KEY", secret, "API `KEY`")
	return func(ctx context.Context, inv *invocation) error {
		usage := func(format string, a ...any) error { return usageError{cmd: "send", err: fmt.Errorf(format, a...)} }
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
		c, err := client.New(url, key, client.WithUserAgent("webhookd-send"))
		if err != nil {
			return err
		}
		var opts []client.CallOption
		if idemKey != "" {
			opts = append(opts, client.WithIdempotencyKey(idemKey))
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
			msg := apiErr.Code + ": " + apiErr.Message
			if apiErr.RequestID != "" {
				msg += " [" + apiErr.RequestID + "]"
			}
			return refusedError{errors.New(msg)}
		case err != nil:
			return refusedError{err}
		}
		fmt.Fprintln(inv.stdout, ev.ID)
		return nil
	}
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
