package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// TestIdempotencyRecordsHoldNoSecret: the answers that carry a secret (a
// portal link's token, an endpoint's signing secret on create and on
// rotate-secret) are in no idempotency record in a readable form, with or
// without WEBHOOKD_ENCRYPTION_KEY, and a repeat with the same key and API
// key still gets them back byte for byte; a repeat with another API key of
// the project gets idempotency_key_mismatch, not the secret.
func TestIdempotencyRecordsHoldNoSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	servers := map[string]*httptest.Server{"no encryption key": h.srv, "an encryption key": h.newServer(encrypted(t, h))}
	for name, srv := range servers {
		ep := h.do(req{method: "POST", path: "/v1/endpoints", body: map[string]any{"url": "http://127.0.0.1:9/"},
			idem: "setup " + name, server: srv})
		expectStatus(t, ep, http.StatusCreated)
		id := ep.json(t)["id"].(string)
		for _, c := range []struct {
			path, secretField string
			status            int
		}{
			{"/v1/portal-sessions", "url", http.StatusCreated},
			{"/v1/endpoints", "secret", http.StatusCreated},
			{"/v1/endpoints/" + id + "/rotate-secret", "secret", http.StatusOK},
		} {
			var body any
			if c.path == "/v1/endpoints" {
				body = map[string]any{"url": "http://127.0.0.1:9/"}
			}
			r := req{method: "POST", path: c.path, body: body, idem: name + c.path, server: srv}
			first := h.do(r)
			expectStatus(t, first, c.status)
			secret := first.json(t)[c.secretField].(string)
			if c.secretField == "url" {
				secret = secret[strings.LastIndex(secret, "/")+1:] // the token
			}
			h.noRecordHolds(t, secret)
			again := h.do(r)
			expectStatus(t, again, c.status)
			if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
				t.Fatalf("%s, %s: repeat %s (replayed %q), want the first answer byte for byte: %s", name, c.path,
					again.body, again.header.Get("Idempotent-Replayed"), first.body)
			}
			r.key = h.newKey("main", storage.ProjectPlan{}) // another key of the same project
			other := h.do(r)
			if expectStatus(t, other, http.StatusUnprocessableEntity); other.errorCode(t) != "idempotency_key_mismatch" ||
				bytes.Contains(other.body, []byte(secret)) {
				t.Fatalf("%s, %s: repeat with another API key: %s", name, c.path, other.body)
			}
		}
	}
}

// noRecordHolds fails t when an idempotency record holds secret in clear.
func (h *harness) noRecordHolds(t *testing.T, secret string) {
	t.Helper()
	rows, err := h.db.Pool().Query(context.Background(), `SELECT t::text, response_body FROM idempotency_records t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var text string
		var body []byte
		if err := rows.Scan(&text, &body); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, secret) || bytes.Contains(body, []byte(secret)) {
			t.Fatalf("an idempotency record holds %s in clear: %s", secret, body)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// encrypted makes a server use a DB on h's schema that has an encryption key.
func encrypted(t *testing.T, h *harness) option {
	var schema string
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	db, err := storage.Open(context.Background(), storage.Config{URL: testenv.DatabaseURL(), SearchPath: schema,
		EncryptionKeys: "k1:" + base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return func(c *api.Config) { c.DB = db }
}
