package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/relay"
)

// listenSetup is `webhookd listen` (SPEC §3 "Relay endpoints"): it makes
// (or reuses) the project's endpoint relay://NAME, keeps a stream open to
// the API for it, and forwards each of its deliveries, signed headers and
// all, to the local URL, sending the local answer back as the attempt's.
// It prints one line per forwarded delivery on stdout and what happens to
// the stream on stderr, connects again with backoff when the stream drops,
// and exits 0 on SIGINT or SIGTERM. A key or name the API refuses is a
// refusal (exit 1); a bad command line a usage error (exit 2).
func listenSetup(f *flagSet) action {
	var (
		apiURL    = "http://127.0.0.1:8080"
		key       string
		forwardTo string
		name      string
		events    string
	)
	f.String(&forwardTo, "forward-to", "", plain, "the local receiver's `URL`, such as http://localhost:3000/hooks (required)")
	f.String(&name, "endpoint", "", plain, "the relay's `NAME`: the endpoint relay://NAME (default listen)")
	f.String(&events, "events", "", plain, "the event `TYPES` it subscribes to, comma-separated (default: every type)")
	f.String(&apiURL, "api-url", "WEBHOOKD_API_URL", secretURL, "the API's base `URL`")
	f.String(&key, "api-key", "WEBHOOKD_API_KEY", secret, "API `KEY`")
	return func(ctx context.Context, inv *invocation) error {
		usage := func(format string, a ...any) error { return usageError{cmd: "listen", err: fmt.Errorf(format, a...)} }
		if name == "" {
			name = "listen"
		}
		var types []string
		for t := range strings.SplitSeq(events, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
		switch u, err := url.Parse(forwardTo); {
		case forwardTo == "":
			return usage("--forward-to is required")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return usage("--forward-to: want an http:// or https:// URL, got %q", forwardTo)
		case !webhookd.ValidRelayName(name):
			return usage("--endpoint: want 1 to 64 characters of A-Z a-z 0-9 _ -, got %q", name)
		case key == "":
			return errors.New("no API key: set WEBHOOKD_API_KEY or --api-key")
		}
		c, err := client.New(apiURL, key, client.WithUserAgent("webhookd-listen"))
		if err != nil {
			return err
		}
		ep, created, err := c.RelayEndpoint(ctx, name, types)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return refusedError{apiError(err)}
		}
		verb := "using"
		if created {
			verb = "created"
		}
		fmt.Fprintf(inv.stderr, "webhookd: listen: %s endpoint %s (%s); forwarding its deliveries to %s\n", verb, ep.ID, ep.URL, forwardTo)
		var mu sync.Mutex // lines from concurrent deliveries stay whole
		l := &relay.Listener{APIURL: apiURL, APIKey: key, Name: name, ForwardTo: forwardTo,
			Forwarded: func(r relay.Request, a relay.Response, took time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				printForwarded(inv.stdout, r, a, took)
			},
			Status: func(line string) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(inv.stderr, "webhookd: listen: %s\n", line)
			}}
		if err := l.Run(ctx); err != nil {
			return refusedError{err}
		}
		return nil
	}
}

// printForwarded prints the line of one forwarded delivery: when, the
// event's type and id, the attempt, and the local answer (or why there was
// none) with how long it took.
func printForwarded(w io.Writer, r relay.Request, a relay.Response, took time.Duration) {
	answer := fmt.Sprint(a.Status)
	if a.Error != "" {
		answer = "error: " + a.Error
	}
	fmt.Fprintf(w, "%s  %s  %s  attempt %s  -> %s  (%d ms)\n", time.Now().UTC().Format(time.TimeOnly),
		r.Header.Get("X-Event-Type"), r.Header.Get("webhook-id"), r.Header.Get("X-Delivery-Attempt"), answer, took.Milliseconds())
}

// apiError is err as send prints an API's refusal: its code, message and
// request id.
func apiError(err error) error {
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		return err
	}
	msg := apiErr.Code + ": " + apiErr.Message
	if apiErr.RequestID != "" {
		msg += " [" + apiErr.RequestID + "]"
	}
	return errors.New(msg)
}
