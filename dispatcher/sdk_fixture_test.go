package dispatcher_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/wire"
)

var updateSDKFixture = flag.Bool("update-sdk-fixture", false,
	"rewrite ../sdks/conformance/signatures.json from deliveries this test makes")

const sdkFixturePath = "../sdks/conformance/signatures.json"

// sdkFixture is sdks/conformance/signatures.json: requests webhookd really
// sent, which every SDK's verify must accept (and reject once tampered).
type sdkFixture struct {
	About      string           `json:"about"`
	Deliveries []fixtureRequest `json:"deliveries"`
}

type fixtureRequest struct {
	Name    string            `json:"name"`
	Secrets []string          `json:"secrets"` // each of these alone must verify it
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// TestSDKSignatureFixture delivers two events through a real worker to a
// receiver on loopback, one before and one during a secret rotation, and
// checks that what arrived is signed as SignatureHeader says. The committed
// fixture must be what SignatureHeader makes of its own ids, timestamps and
// bodies; go test ./dispatcher -run TestSDKSignatureFixture
// -update-sdk-fixture rewrites it from the deliveries just made.
func TestSDKSignatureFixture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rc := newReceiver(t, status(http.StatusOK))
	ep := e.endpoint(rc.URL+"/hook", nil)
	ctx := context.Background()

	var captured []fixtureRequest
	capture := func(name string, secrets []string) {
		ids := e.publish("invoice.paid", 1)
		e.waitStatus(ids[0], webhookd.DeliverySucceeded, 10*time.Second)
		got := rc.requests()
		r := got[len(got)-1]
		h := map[string]string{}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			h[k] = r.header.Get(k)
		}
		captured = append(captured, fixtureRequest{Name: name, Secrets: secrets, Headers: h, Body: string(r.body)})
	}
	capture("one_secret", []string{ep.Secret})
	newSecretValue := newSecret(t)
	if _, err := e.db.Store().RotateSecret(ctx, e.project.ID, ep.ID, newSecretValue, time.Now()); err != nil {
		t.Fatal(err)
	}
	capture("during_rotation", []string{newSecretValue, ep.Secret})
	if n := len(strings.Fields(captured[1].Headers["webhook-signature"])); n != 2 {
		t.Fatalf("a delivery during a rotation carried %d signatures, want 2", n)
	}
	for _, r := range captured {
		checkFixtureRequest(t, "delivered "+r.Name, r)
	}

	if *updateSDKFixture {
		f := sdkFixture{About: "Requests webhookd's dispatcher really sent to a receiver (dispatcher/sdk_fixture_test.go; regenerate with go test ./dispatcher -run TestSDKSignatureFixture -update-sdk-fixture (the package before the flag)). Each SDK's verify must accept each request with each of its secrets alone, at its webhook-timestamp, and refuse it with a changed body, another secret, or a clock more than 5 minutes away.",
			Deliveries: captured}
		b, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sdkFixturePath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(sdkFixturePath)
	if err != nil {
		t.Fatalf("%v (make it with -update-sdk-fixture)", err)
	}
	var f sdkFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Deliveries) != len(captured) {
		t.Fatalf("the fixture has %d requests, want %d: regenerate it with -update-sdk-fixture", len(f.Deliveries), len(captured))
	}
	for _, r := range f.Deliveries {
		checkFixtureRequest(t, "fixture "+r.Name, r)
	}
}

// checkFixtureRequest checks that r's signature header is what the
// dispatcher's signer makes of its id, timestamp, body and secrets.
func checkFixtureRequest(t *testing.T, what string, r fixtureRequest) {
	t.Helper()
	sec, err := strconv.ParseInt(r.Headers["webhook-timestamp"], 10, 64)
	if err != nil {
		t.Fatalf("%s: webhook-timestamp %q", what, r.Headers["webhook-timestamp"])
	}
	want, err := wire.SignatureHeader(r.Secrets, r.Headers["webhook-id"], time.Unix(sec, 0), []byte(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Headers["webhook-signature"]; got != want {
		t.Fatalf("%s: webhook-signature %q, want %q", what, got, want)
	}
}
