package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// newEncryptionKey returns "id:" + the base64 of 32 random bytes.
func newEncryptionKey(id string) string {
	raw := make([]byte, 32)
	rand.Read(raw)
	return id + ":" + base64.StdEncoding.EncodeToString(raw)
}

// dumpSchema returns every row of every table in the schema of db as JSON
// text (bytea as hex).
func dumpSchema(t *testing.T, db *storage.DB) string {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool().Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		rows.Scan(&name)
		tables = append(tables, name)
	}
	if rows.Err() != nil || len(tables) < 5 {
		t.Fatalf("tables %v: %v", tables, rows.Err())
	}
	var dump strings.Builder
	for _, table := range tables {
		var text *string
		if err := db.Pool().QueryRow(ctx, `SELECT string_agg(to_jsonb(t)::text, E'\n') FROM `+table+` t`).Scan(&text); err != nil {
			t.Fatal(err)
		}
		if text != nil {
			dump.WriteString(*text + "\n")
		}
	}
	return dump.String()
}

// TestSecretsEncryptedAtRest: with WEBHOOKD_ENCRYPTION_KEY set, the API
// still shows, replays and signs with the secrets, and no table holds one
// (in text or as bytes) — not the endpoints, not the stored responses of
// their creation and rotation. A secret stored in clear before, and every
// value under an old key, is resealed by `webhookd secrets reseal`, after
// which the old key can go.
func TestSecretsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	k1, k2 := newEncryptionKey("k1"), newEncryptionKey("k2")
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	m, key := startMain(t, Roles{API: true, Worker: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.EncryptionKey = true, k1
	})
	ctx := context.Background()
	u, _ := url.Parse(testenv.DatabaseURL())
	q := u.Query()
	q.Set("search_path", m.SearchPath)
	u.RawQuery = q.Encode()
	vars := map[string]string{"WEBHOOKD_DATABASE_URL": u.String()}

	// A secret stored in clear before encryption was turned on.
	plainDB, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: m.SearchPath})
	if err != nil {
		t.Fatal(err)
	}
	defer plainDB.Close()
	var projectID string
	if err := m.DB.Pool().QueryRow(ctx, `SELECT id FROM projects`).Scan(&projectID); err != nil {
		t.Fatal(err)
	}
	old, err := plainDB.Store().CreateEndpoint(ctx, projectID, storage.NewEndpoint{URL: "http://127.0.0.1:9/",
		Secret: "whsec_c2VjcmV0c3RvcmVkaW5jbGVhcmJlZm9yZQ=="}, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	post := func(path, body, idem string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+m.APIAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", idem)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	epBody := fmt.Sprintf(`{"url":%q}`, rc.URL)
	ep := post("/v1/endpoints", epBody, "create-ep")
	if again := post("/v1/endpoints", epBody, "create-ep"); again["secret"] != ep["secret"] {
		t.Fatalf("the replayed creation shows secret %v, want %v", again["secret"], ep["secret"])
	}
	epID := ep["id"].(string)
	rot := post("/v1/endpoints/"+epID+"/rotate-secret", `{}`, "rotate-ep")
	secrets := []string{ep["secret"].(string), rot["secret"].(string), old.Secret}
	if rot["previous_secret"] != secrets[0] {
		t.Fatalf("rotation: %v", rot)
	}
	shown := callAPI(t, m.APIAddr, key, "GET", "/v1/endpoints/"+epID+"/secret", "", false)
	if shown["secret"] != secrets[1] || shown["previous_secret"] != secrets[0] {
		t.Fatalf("GET secret: %v", shown)
	}
	// Deliveries are signed with the secret, opened for the attempt.
	callAPI(t, m.APIAddr, key, "POST", "/v1/events", fmt.Sprintf(`{"type":"a","data":1,"endpoint_ids":[%q]}`, epID), true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	wh, _ := standardwebhooks.NewWebhook(secrets[1])
	if err := wh.Verify(bodies[0], got[0].Header); err != nil {
		t.Fatalf("signature with the current secret: %v", err)
	}
	mu.Unlock()

	leaks := func(dump string) []string {
		var found []string
		for _, s := range append(secrets, "whsec_") {
			raw := strings.TrimPrefix(s, "whsec_")
			for _, form := range []string{s, raw, hex.EncodeToString([]byte(s))} {
				if form != "" && strings.Contains(dump, form) {
					found = append(found, form)
				}
			}
		}
		return found
	}
	dump := dumpSchema(t, m.DB)
	if !strings.Contains(dump, secrets[2]) {
		t.Fatal("the secret stored in clear before is not in the dump: the dump misses rows")
	}
	if found := leaks(strings.ReplaceAll(dump, secrets[2], "")); len(found) != 0 {
		t.Fatalf("before reseal the dump holds %v; want only the secret stored in clear before", found)
	}

	// Turned on over old data, and then rotated: reseal, drop the old key.
	reseal := func(keys string) string {
		t.Helper()
		vars["WEBHOOKD_ENCRYPTION_KEY"] = keys
		var out bytes.Buffer
		if err := run(ctx, []string{"secrets", "reseal"}, env(vars), &out, io.Discard); err != nil {
			t.Fatalf("secrets reseal: %v", err)
		}
		return out.String()
	}
	if out := reseal(k1); out != "resealed 1 endpoints and 0 stored responses\n" {
		t.Fatalf("reseal with k1: %q", out)
	}
	dump = dumpSchema(t, m.DB)
	if found := leaks(dump); len(found) != 0 || strings.Contains(dump, "whenc:k2:") {
		t.Fatalf("after reseal the dump holds %v", found)
	}
	if out := reseal(k2 + "," + k1); out != "resealed 2 endpoints and 3 stored responses\n" {
		t.Fatalf("reseal with k2 first: %q", out)
	}
	dump = dumpSchema(t, m.DB)
	if found := leaks(dump); len(found) != 0 || strings.Contains(dump, "whenc:k1:") || !strings.Contains(dump, "whenc:k2:") {
		t.Fatalf("after rotation the dump holds %v (or values under k1)", found)
	}
	k2Only, err := storage.Open(ctx, storage.Config{URL: testenv.DatabaseURL(), SearchPath: m.SearchPath, EncryptionKeys: k2})
	if err != nil {
		t.Fatal(err)
	}
	defer k2Only.Close()
	for id, want := range map[string]string{epID: secrets[1], old.ID: secrets[2]} {
		e, err := k2Only.Store().GetEndpoint(ctx, projectID, id)
		if err != nil || e.Secret != want {
			t.Fatalf("endpoint %s with k2 alone: %q, %v", id, e.Secret, err)
		}
	}
	// Without the key, a sealed secret is an error, never ciphertext shown
	// as a secret.
	if _, err := plainDB.Store().GetEndpoint(ctx, projectID, epID); err == nil {
		t.Fatal("a sealed secret opened without its key")
	}
}
