package api_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/storage"
)

const orderSchema = `{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer","minimum":1},
	"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"}}}}}}`

func (h *harness) createEventType(body string) response {
	h.t.Helper()
	return h.do(req{method: "POST", path: "/v1/event-types", body: body, idem: uuid.NewString()})
}

func expectField(t *testing.T, r response, status int, field string) {
	t.Helper()
	expectStatus(t, r, status)
	e, _ := r.json(t)["error"].(map[string]any)
	if e["code"] != "validation_failed" || e["field"] != field {
		t.Fatalf("want validation_failed naming %q; got %s", field, r.body)
	}
}

func TestEventTypeCatalog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	// Refused entries name their field.
	expectField(t, h.createEventType(`{"name":"bad name"}`), 400, "name")
	expectField(t, h.createEventType(`{"name":"a","schema":{"type":"nope"}}`), 400, "schema")
	expectField(t, h.createEventType(`{"name":"a","schema":"x"}`), 400, "schema")
	expectField(t, h.createEventType(`{"name":"a","validate":true}`), 400, "validate")
	expectField(t, h.createEventType(`{"name":"a","schema":`+orderSchema+`,"example":{"amount":0}}`), 400, "example.amount")
	expectField(t, h.createEventType(`{"name":"a","schema":`+orderSchema+`,"example":{"amount":1,"items":[{"sku":1}]}}`),
		400, "example.items[0].sku")
	// A $ref never reads a file or the network (TestEventTypeSchemaRefs).
	expectField(t, h.createEventType(`{"name":"a","schema":{"$ref":"file:///etc/passwd"}}`), 400, "schema")

	r := h.createEventType(`{"name":"order.paid","description":"An order was paid.","schema":` + orderSchema +
		`,"example":{"amount":5},"validate":true}`)
	expectStatus(t, r, http.StatusCreated)
	et := r.json(t)
	if et["name"] != "order.paid" || et["validate"] != true || et["archived"] != false || et["example"] == nil {
		t.Fatalf("created %s", r.body)
	}
	expectField(t, h.createEventType(`{"name":"order.paid"}`), 400, "name") // taken
	for _, n := range []string{"a.one", "b.two", "c.three"} {
		expectStatus(t, h.createEventType(`{"name":"`+n+`"}`), http.StatusCreated)
	}

	// Cursor pages, by name.
	var names []string
	path := "/v1/event-types?limit=2"
	for range 5 {
		r := h.do(req{method: "GET", path: path})
		expectStatus(t, r, http.StatusOK)
		page := r.json(t)
		for _, e := range page["data"].([]any) {
			names = append(names, e.(map[string]any)["name"].(string))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		path = "/v1/event-types?limit=2&cursor=" + next
	}
	if strings.Join(names, ",") != "a.one,b.two,c.three,order.paid" {
		t.Fatalf("pages gave %v", names)
	}

	// Validation of events: single, batch, and types not validated.
	ok := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{"amount":3}}`, idem: uuid.NewString()})
	expectStatus(t, ok, http.StatusAccepted)
	bad := h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{"amount":"3"}}`, idem: uuid.NewString()})
	expectField(t, bad, 400, "data.amount")
	batch := h.do(req{method: "POST", path: "/v1/events/batch", idem: uuid.NewString(),
		body: `{"events":[{"type":"a.one","data":1},{"type":"order.paid","data":{"amount":1,"items":[{"sku":false}]}}]}`})
	expectField(t, batch, 400, "events[1].data.items[0].sku")
	expectField(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":[]}`, idem: uuid.NewString()}),
		400, "data")
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"a.one","data":"anything"}`,
		idem: uuid.NewString()}), http.StatusAccepted)
	if n := h.count("events"); n != 2 {
		t.Fatalf("%d events written; refused ones must write nothing", n)
	}

	// Another project sees none of it, and may use the name.
	other := h.newKey("other", storage.ProjectPlan{})
	expectStatus(t, h.do(req{method: "GET", path: "/v1/event-types/order.paid", key: other}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/event-types/order.paid", key: other, body: `{"validate":false}`}),
		http.StatusNotFound)
	expectStatus(t, h.do(req{method: "DELETE", path: "/v1/event-types/order.paid", key: other}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", key: other, body: `{"type":"order.paid","data":1}`,
		idem: uuid.NewString()}), http.StatusAccepted)

	// PATCH checks the entry as it would be, and applies at once.
	expectField(t, h.do(req{method: "PATCH", path: "/v1/event-types/order.paid", body: `{"example":{"amount":-1}}`}), 400,
		"example.amount")
	expectField(t, h.do(req{method: "PATCH", path: "/v1/event-types/order.paid", body: `{"schema":null}`}), 400, "validate")
	p := h.do(req{method: "PATCH", path: "/v1/event-types/order.paid", body: `{"validate":false,"description":null}`})
	expectStatus(t, p, http.StatusOK)
	if p.json(t)["validate"] != false || p.json(t)["description"] != "" {
		t.Fatalf("patched %s", p.body)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{"amount":"3"}}`,
		idem: uuid.NewString()}), http.StatusAccepted)
	expectStatus(t, h.do(req{method: "PATCH", path: "/v1/event-types/order.paid", body: `{"validate":true}`}), http.StatusOK)
	expectField(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{}}`,
		idem: uuid.NewString()}), 400, "data")

	// DELETE archives: gone from the list, still readable, no longer validating.
	d := h.do(req{method: "DELETE", path: "/v1/event-types/order.paid"})
	expectStatus(t, d, http.StatusOK)
	if d.json(t)["archived"] != true {
		t.Fatalf("deleted %s", d.body)
	}
	g := h.do(req{method: "GET", path: "/v1/event-types/order.paid"})
	expectStatus(t, g, http.StatusOK)
	if g.json(t)["archived"] != true {
		t.Fatalf("archived entry reads %s", g.body)
	}
	l := h.do(req{method: "GET", path: "/v1/event-types"})
	if strings.Contains(string(l.body), "order.paid") {
		t.Fatalf("archived entry listed: %s", l.body)
	}
	if l = h.do(req{method: "GET", path: "/v1/event-types?archived=true"}); !strings.Contains(string(l.body), "order.paid") {
		t.Fatalf("archived=true leaves it out: %s", l.body)
	}
	expectStatus(t, h.do(req{method: "POST", path: "/v1/events", body: `{"type":"order.paid","data":{}}`,
		idem: uuid.NewString()}), http.StatusAccepted)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/event-types/no.such"}), http.StatusNotFound)
	expectStatus(t, h.do(req{method: "GET", path: "/v1/event-types/bad%20name"}), http.StatusNotFound)
}

func TestPortalSessionLinks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.PortalBaseURL = "http://portal.example:8081/" })
	expectStatus(t, h.do(req{method: "POST", path: "/v1/portal-sessions", body: `{}`}), http.StatusBadRequest) // no key
	for _, ttl := range []string{`"30s"`, `"25h"`, `"soon"`, `true`, `10`} {
		expectField(t, h.do(req{method: "POST", path: "/v1/portal-sessions", body: `{"ttl":` + ttl + `}`,
			idem: uuid.NewString()}), 400, "ttl")
	}
	before := time.Now()
	r := h.do(req{method: "POST", path: "/v1/portal-sessions", idem: uuid.NewString()})
	expectStatus(t, r, http.StatusCreated)
	link := r.json(t)
	url, _ := link["url"].(string)
	token, found := strings.CutPrefix(url, "http://portal.example:8081/portal/open/")
	if !found || !strings.HasPrefix(token, "wpl_") || len(token) < 40 {
		t.Fatalf("link %s", r.body)
	}
	exp, err := time.Parse(time.RFC3339, link["expires_at"].(string))
	if err != nil || exp.Sub(before) < 14*time.Minute || exp.Sub(before) > 16*time.Minute {
		t.Fatalf("expires_at %v (default 15m)", link["expires_at"])
	}
	r = h.do(req{method: "POST", path: "/v1/portal-sessions", body: `{"ttl":"24h"}`, idem: uuid.NewString()})
	expectStatus(t, r, http.StatusCreated)

	// Only the token's hash is stored.
	var n int
	hash := sha256.Sum256([]byte(token))
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM portal_links
		WHERE token_hash = $1 AND project_id = $2`, hash[:], h.projectOf(h.key)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("link row by hash: %d, %v", n, err)
	}
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM portal_links
		WHERE position($1 in encode(token_hash, 'escape')) > 0`, token).Scan(&n); err != nil || n != 0 {
		t.Fatalf("token stored in clear: %d, %v", n, err)
	}
}

// TestEventTypeSchemaRefs: a schema must be self-contained. A $ref that
// points outside it (a relative one too, which used to resolve back to the
// schema itself) is refused with a message that says so, not the JSON
// Schema library's ("no URLLoader registered for ..."); references inside
// it work.
func TestEventTypeSchemaRefs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for schema, says := range map[string]string{
		`{"$ref":"file:///etc/passwd"}`:                               `schema: external $ref "file:///etc/passwd" is not allowed; schemas must be self-contained`,
		`{"$ref":"http://127.0.0.1:9/s.json"}`:                        `schema: external $ref "http://127.0.0.1:9/s.json" is not allowed; schemas must be self-contained`,
		`{"properties":{"to":{"$ref":"address.json#/street"}}}`:       `schema: external $ref "address.json" is not allowed`,
		`{"$id":"https://example.com/order.json","$ref":"item.json"}`: `schema: external $ref "https://example.com/item.json" is not allowed`,
		`{"$schema":"https://example.com/my-meta"}`:                   `schema: $schema "https://example.com/my-meta" is not a JSON Schema draft`,
	} {
		r := h.createEventType(`{"name":"a","schema":` + schema + `}`)
		expectField(t, r, 400, "schema")
		msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
		if !strings.HasPrefix(msg, says) || strings.Contains(msg, "URLLoader") {
			t.Errorf("schema %s: message %q; want it to begin %q", schema, msg, says)
		}
	}
	// References inside the schema still work, to a pointer or to a
	// subschema's relative $id.
	expectStatus(t, h.createEventType(`{"name":"ref.inside","schema":{"$defs":{"price":{"type":"integer"},`+
		`"sku":{"$id":"sku.json","type":"string"}},"properties":{"amount":{"$ref":"#/$defs/price"},"sku":{"$ref":"sku.json"}}},`+
		`"example":{"amount":5,"sku":"a"}}`), http.StatusCreated)
	expectField(t, h.createEventType(`{"name":"ref.inside2","schema":{"$defs":{"sku":{"$id":"sku.json","type":"string"}},`+
		`"properties":{"sku":{"$ref":"sku.json"}}},"example":{"sku":1}}`), 400, "example.sku")
}
