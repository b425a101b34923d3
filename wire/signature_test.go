package wire

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func webhookHeaders(msgID string, ts time.Time, signature string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", signature)
	return h
}

// TestSignKnownVector checks Sign against the example of the Standard
// Webhooks test suites.
func TestSignKnownVector(t *testing.T) {
	got, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

// TestSignatureHeaderVerifies checks our header with the official Standard
// Webhooks Go library, during a rotation (two secrets) and outside one.
func TestSignatureHeaderVerifies(t *testing.T) {
	current, previous, stranger := newSecret(t), newSecret(t), newSecret(t)
	msgID := "evt_01JNABCDEF0123456789ABCDEF"
	ts := time.Now()
	body := []byte(`{"id":"evt_01JNABCDEF0123456789ABCDEF","type":"order.paid","timestamp":"2025-03-01T12:00:00Z","data":{"n":1}}`)

	tests := []struct {
		name    string
		signers []string
		verify  string
		body    []byte
		ok      bool
	}{
		{"single secret", []string{current}, current, body, true},
		{"rotation: current secret", []string{current, previous}, current, body, true},
		{"rotation: previous secret", []string{current, previous}, previous, body, true},
		{"rotation: tampered body, current", []string{current, previous}, current, append(body[:len(body):len(body)], ' '), false},
		{"rotation: tampered body, previous", []string{current, previous}, previous, []byte(strings.Replace(string(body), "1", "2", 1)), false},
		{"other secret", []string{current, previous}, stranger, body, false},
		{"previous secret after rotation window", []string{current}, previous, body, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig, err := SignatureHeader(tt.signers, msgID, ts, body)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(strings.Split(sig, " ")); n != len(tt.signers) {
				t.Fatalf("header %q has %d entries, want %d", sig, n, len(tt.signers))
			}
			wh, err := standardwebhooks.NewWebhook(tt.verify)
			if err != nil {
				t.Fatal(err)
			}
			err = wh.Verify(tt.body, webhookHeaders(msgID, ts, sig))
			if tt.ok && err != nil {
				t.Errorf("Verify: %v", err)
			}
			if !tt.ok && !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("Verify = %v, want ErrNoMatchingSignature", err)
			}
		})
	}
}

func TestSignMalformedSecret(t *testing.T) {
	for _, secret := range []string{
		"",
		"whsec_",
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // no prefix
		"whsec_not*base64",
		"whsec_YWJj=", // bad padding
	} {
		_, err := Sign(secret, "evt_1", time.Unix(1, 0), nil)
		if !errors.Is(err, ErrMalformedSecret) {
			t.Errorf("Sign(%q) error = %v, want ErrMalformedSecret", secret, err)
		}
		if err != nil && secret != "" && strings.Contains(err.Error(), secret) {
			t.Errorf("error %q reveals the secret", err)
		}
	}
	if _, err := SignatureHeader([]string{newSecret(t), "whsec_!"}, "evt_1", time.Unix(1, 0), nil); !errors.Is(err, ErrMalformedSecret) {
		t.Errorf("SignatureHeader with one bad secret: error = %v, want ErrMalformedSecret", err)
	}
	if _, err := SignatureHeader(nil, "evt_1", time.Unix(1, 0), nil); err == nil {
		t.Error("SignatureHeader with no secret: no error")
	}
}
