package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// TestStoredTextIsEscapedOnceInJSON: a payload and a receiver's response
// body full of characters that HTML and JSON escape go out of the API as
// what PostgreSQL holds — the payload byte for byte, the body JSON-escaped
// once and never HTML-escaped (no "\u003c", "&lt;" or "&amp;amp;"), so the
// dashboard, which escapes for HTML, and the API show the same text.
func TestStoredTextIsEscapedOnceInJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ep := h.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook", "description": `<i>"ops" & co</i>`})
	data := `{"html":"<script>alert('x')</script>","amp":"a & b","quote":"\"q\" \\ /","u":"é \u00e9 \u2028"}`
	r := h.do(req{method: "POST", path: "/v1/events", idem: "esc", body: `{"type":"a","data":` + data + `}`})
	expectStatus(t, r, http.StatusAccepted)
	var ev struct {
		ID         string          `json:"id"`
		Data       json.RawMessage `json:"data"`
		Deliveries []struct{ ID string }
	}
	if err := json.Unmarshal(r.body, &ev); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := h.db.Pool().QueryRow(context.Background(), `SELECT data::text FROM events WHERE id = $1`, ev.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != data || string(ev.Data) != data {
		t.Fatalf("sent %s\nstored %s\nanswered %s", data, stored, ev.Data)
	}
	g := h.do(req{method: "GET", path: "/v1/events/" + ev.ID})
	if !bytes.Contains(g.body, []byte(`"data":`+data)) {
		t.Fatalf("GET event does not carry the stored payload as is: %s", g.body)
	}

	// A receiver's answer, recorded by the worker.
	body := `<b>&amp;</b> "q" \ é ` + "\u2028"
	h.attempt(ev.Deliveries[0].ID, webhookd.Attempt{StatusCode: new(500), ResponseBody: body,
		ResponseHeaders: map[string]string{"Content-Type": "text/html; charset=<x>"}},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: webhookd.ReasonExhausted})
	d := h.do(req{method: "GET", path: "/v1/deliveries/" + ev.Deliveries[0].ID})
	expectStatus(t, d, http.StatusOK)
	var got struct {
		Attempts []struct {
			ResponseBody    string            `json:"response_body"`
			ResponseHeaders map[string]string `json:"response_headers"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(d.body, &got); err != nil || len(got.Attempts) != 1 {
		t.Fatalf("delivery %s: %v", d.body, err)
	}
	if a := got.Attempts[0]; a.ResponseBody != body || a.ResponseHeaders["Content-Type"] != "text/html; charset=<x>" {
		t.Fatalf("response_body %q, headers %v; stored %q", a.ResponseBody, a.ResponseHeaders, body)
	}
	e := h.do(req{method: "GET", path: "/v1/endpoints/" + ep["id"].(string)})
	for _, raw := range [][]byte{r.body, g.body, d.body, e.body} {
		for _, bad := range []string{`\u003c`, `\u003e`, `\u0026`, "&lt;", "&amp;amp;", `\\\"`} {
			if strings.Contains(string(raw), bad) {
				t.Fatalf("answer holds %s, text escaped twice or for HTML: %s", bad, raw)
			}
		}
	}
	if !strings.Contains(string(e.body), `"description":"<i>\"ops\" & co</i>"`) {
		t.Fatalf("endpoint description not as stored: %s", e.body)
	}
}
