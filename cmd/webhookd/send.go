package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/webhookd/webhookd/client"
)

// errSendFailed says webhookd send failed and has already said why on
// stderr; main exits 1 for it.
var errSendFailed = errors.New("send failed")

const sendUsage = `usage: webhookd send --type T --data JSON|@file.json [--external-id X] [--endpoint ID]... [--idempotency-key K]
                     [--api-url URL] [--api-key KEY]`

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runSend posts one event through the Go client (SPEC §7): the event id
// alone on stdout; a refused request prints the API's error code and
// message on stderr and returns errSendFailed.
func runSend(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhookd send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	apiURL := getenv("WEBHOOKD_API_URL")
	if apiURL == "" {
		apiURL = "http://127.0.0.1:8080"
	}
	var (
		url        = fs.String("api-url", apiURL, "the API's base URL (WEBHOOKD_API_URL)")
		key        = fs.String("api-key", getenv("WEBHOOKD_API_KEY"), "API key (WEBHOOKD_API_KEY)")
		typ        = fs.String("type", "", "event type (required)")
		data       = fs.String("data", "", "event data: JSON, or @file.json, or @- for standard input (required)")
		externalID = fs.String("external-id", "", "external id, unique per project")
		idemKey    = fs.String("idempotency-key", "", "Idempotency-Key (default: a new UUID, reused on every retry)")
		endpoints  stringList
	)
	fs.Var(&endpoints, "endpoint", "send to this endpoint id only (repeat for several)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fail := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "webhookd send: "+format+"\n", a...)
		return errSendFailed
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected argument %q\n%s", fs.Arg(0), sendUsage)
	case *typ == "":
		return fail("--type is required\n%s", sendUsage)
	case *data == "":
		return fail("--data is required\n%s", sendUsage)
	case *key == "":
		return fail("no API key: set WEBHOOKD_API_KEY or --api-key")
	}
	raw, err := readData(*data)
	if err != nil {
		return fail("--data: %v", err)
	}
	c, err := client.New(*url, *key, client.WithUserAgent("webhookd-send"))
	if err != nil {
		return fail("%v", err)
	}
	var opts []client.CallOption
	if *idemKey != "" {
		opts = append(opts, client.WithIdempotencyKey(*idemKey))
	}
	ev, err := c.SendEvent(ctx, client.NewEvent{Type: *typ, Data: raw, ExternalID: *externalID, EndpointIDs: endpoints}, opts...)
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		msg := apiErr.Code + ": " + apiErr.Message
		if apiErr.ExistingID != "" {
			msg += " (existing event " + apiErr.ExistingID + ")"
		}
		if apiErr.RequestID != "" {
			msg += " [" + apiErr.RequestID + "]"
		}
		return fail("%s", msg)
	case err != nil:
		return fail("%v", err)
	}
	fmt.Fprintln(stdout, ev.ID)
	return nil
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
