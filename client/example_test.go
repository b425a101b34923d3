package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/wire"
)

// The examples run against a webhookd API that TestMain starts; apiURL
// and apiKey stand for your WEBHOOKD_API_URL and WEBHOOKD_API_KEY.

// Send one event. The client makes an Idempotency-Key for it and reuses
// it on every retry, so a lost answer never creates a second event.
func ExampleClient_SendEvent() {
	c, err := client.New(apiURL, apiKey, client.WithUserAgent("billing/1.4"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := c.SendEvent(ctx, client.NewEvent{
		Type:       "invoice.paid",
		Data:       map[string]any{"invoice": "in_1001", "amount": 4200},
		ExternalID: "invoice-in_1001-paid", // a second send of it fails with ErrExternalIDTaken
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Type, strings.HasPrefix(ev.ID, "evt_"))
	// Output: invoice.paid true
}

// Send several events at once, all or none.
func ExampleClient_SendEvents() {
	c, err := client.New(apiURL, apiKey)
	if err != nil {
		log.Fatal(err)
	}
	evs, err := c.SendEvents(context.Background(), []client.NewEvent{
		{Type: "user.created", Data: map[string]any{"user": "u_1"}},
		{Type: "user.created", Data: map[string]any{"user": "u_2"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Println(ev.Type, string(ev.Data))
	}
	// Output:
	// user.created {"user":"u_1"}
	// user.created {"user":"u_2"}
}

// Reshape what an endpoint receives (a Slack incoming webhook wants
// {"text": ...}) and see the request before any is sent.
func ExampleClient_TestTransformation() {
	c, err := client.New(apiURL, apiKey)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	slack := `function handler(webhook) {
		var inv = webhook.payload.data;
		webhook.payload = {text: "Invoice " + inv.invoice + " paid: " + inv.amount / 100};
		return webhook;
	}`
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{URL: "https://hooks.slack.example.com/services/T0/B0",
		EventTypes: []string{"invoice.paid"}, Transformation: &slack})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.TestTransformation(ctx, ep.ID, client.TransformationTest{Type: "invoice.paid",
		Data: json.RawMessage(`{"invoice":"in_1001","amount":4200}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Send, *res.Body)
	// Output: true {"text":"Invoice in_1001 paid: 42"}
}

// Create an endpoint and read its signing secret.
func ExampleClient_CreateEndpoint() {
	c, err := client.New(apiURL, apiKey)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	ep, err := c.CreateEndpoint(ctx, client.NewEndpoint{
		URL:        "https://example.com/webhooks",
		EventTypes: []string{"invoice.paid"},
	})
	if err != nil {
		log.Fatal(err)
	}
	secret, err := c.EndpointSecret(ctx, ep.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ep.Status, strings.HasPrefix(secret.Secret, "whsec_"), secret.Secret == ep.Secret)
	// Output: active true true
}

// List a project's dead letters, then replay every one of a type as a
// background job.
func ExampleClient_DeadLetters() {
	c, err := client.New(apiURL, apiKey)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	filter := client.DeadLetterFilter{EventType: "invoice.failed"}
	for dl, err := range c.DeadLetters(ctx, filter) { // follows next_cursor
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(dl.EventType, dl.Reason, *dl.LastStatusCode)
	}
	jobID, err := c.ReplayDeadLetters(ctx, filter)
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Job(ctx, jobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Kind, job.Status)
	// Output:
	// invoice.failed client_error 400
	// dead_letter_replay queued
}

// A receiver verifies each delivery with a Standard Webhooks library and
// the endpoint's secret before it trusts the body.
func Example_verifyDelivery() {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // from CreateEndpoint or EndpointSecret
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		log.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		// Deliveries are at least once: skip an event whose webhook-id
		// you have seen before.
		fmt.Println("verified", r.Header.Get("webhook-id"))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	// What webhookd sends (here signed by hand, as a worker would).
	body := []byte(`{"id":"evt_01JDEMO","type":"invoice.paid","timestamp":"2026-01-02T15:04:05Z","data":{}}`)
	now := time.Now()
	sig, err := wire.SignatureHeader([]string{secret}, "evt_01JDEMO", now, body)
	if err != nil {
		log.Fatal(err)
	}
	req, _ := http.NewRequest("POST", receiver.URL, strings.NewReader(string(body)))
	req.Header.Set("webhook-id", "evt_01JDEMO")
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	// Output:
	// verified evt_01JDEMO
	// 204
}

// Hand over many events in one call: they stream as NDJSON, and the
// job's id comes back once the API has stored them all. A worker then
// accepts them in order; WaitJob follows it.
func ExampleClient_Bulk() {
	c, err := client.New(apiURL, apiKey)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	events := func(yield func(client.NewEvent) bool) {
		for i := range 3 {
			if !yield(client.NewEvent{Type: "contact.exported", Data: map[string]int{"contact": i}}) {
				return
			}
		}
	}
	id, err := c.Bulk(ctx, events)
	if err != nil {
		log.Fatal(err)
	}
	j, err := c.Job(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.Kind, j.Total)
	// With a worker running:
	//	j, err = c.WaitJob(ctx, id, time.Second, func(j client.Job) { log.Printf("%d/%d", j.Done, j.Total) })
	// Output: event_bulk 3
}
