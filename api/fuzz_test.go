package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The fuzz targets of the public API, one per route family (issue 11).
// Each holds the properties of check and refused — no 5xx, every 4xx in
// the SPEC's error shape naming the right field, a refusal creates nothing
// — and that a 2xx reads back the same through GET. `make fuzz` runs each
// for FUZZTIME; plain `go test` runs their seeds and testdata/fuzz.

// Seeds from README's and SPEC §2's examples, and the inputs issue 11 found
// by hand.
var eventSeeds = []string{
	`{"type":"invoice.paid","data":{"invoice":"in_1001"}}`,
	`{"type":"invoice.paid","data":{"invoice":"in_1001"},"external_id":"invoice-in_1001-paid"}`,
	`{"type":"order.created","data":{"id":42,"total":"9.99"}}`,
	`{"type":"report.ready","data":[1,2.5e3,null,true,"x"],"endpoint_ids":["ep_x"]}`,
	`{"type":"a","data":"\u00e9\ud83d\ude00"}`,
	"{\"type\":\"a\",\"data\":\"\xff\"}",
	`{"type":"a","data":"\u0000"}`,
	`{"type":"a","data":1e1000000}`,
	`{"type":"a","data":[[[[[[[[[[1]]]]]]]]]]}`,
	`{"type":"a","data":{},"unknown":1}`,
}

func FuzzEvents(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	for i, s := range eventSeeds {
		f.Add([]byte(s), "Bearer", "key-"+strconv.Itoa(i))
	}
	f.Add([]byte(`{"type":"a","data":1,"endpoint_ids":["`+ep+`"]}`), "bearer", "k")
	f.Add([]byte(`{"type":"a","data":1}`), "BEARER", "")
	f.Fuzz(func(t *testing.T, body []byte, scheme, idem string) {
		q := fuzzReq{method: "POST", path: "/v1/events", body: body, scheme: scheme, idem: idem}
		before := fz.rows(t)
		r := fz.serve(t, q)
		if e := check(t, q, r, fieldIn(body, "type", "data", "external_id", "endpoint_ids", "body", "Idempotency-Key")); e != nil {
			fz.refused(t, q, r, before)
			return
		}
		if r.status != http.StatusAccepted {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var in struct{ Data json.RawMessage }
		json.Unmarshal(body, &in)
		fz.eventReadsBack(t, r.body, compact(t, in.Data))
		if after := fz.rows(t); r.header.Get("Idempotent-Replayed") == "" && after.events != before.events+1 {
			t.Fatalf("accepted, but rows %+v, before %+v", after, before)
		}
	})
}

// eventReadsBack holds that an accepted event (one JSON object of the
// answer) carries the data sent and is what GET /v1/events/{id} reads,
// byte for byte.
func (fz *fuzzer) eventReadsBack(t *testing.T, answer, data []byte) {
	t.Helper()
	var ev struct {
		ID   string
		Data json.RawMessage
	}
	if err := json.Unmarshal(answer, &ev); err != nil || !strings.HasPrefix(ev.ID, "evt_") {
		t.Fatalf("accepted event %s: %v", answer, err)
	}
	if !bytes.Equal(ev.Data, data) {
		t.Fatalf("data %s, sent %s", ev.Data, data)
	}
	got := fz.get(t, "/v1/events/"+ev.ID)
	if !bytes.Equal(bytes.TrimSpace(got.body), bytes.TrimSpace(answer)) {
		t.Fatalf("GET reads\n%s\nthe answer was\n%s", got.body, answer)
	}
}

func FuzzEventBatch(f *testing.F) {
	fz := newFuzzer(f)
	fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})
	f.Add([]byte(`{"events":[`+strings.Join(eventSeeds[:4], ",")+`]}`), "b1")
	for i, s := range eventSeeds {
		f.Add([]byte(`{"events":[{"type":"ok","data":1},`+s+`]}`), "b-"+strconv.Itoa(i))
	}
	f.Add([]byte(`{"events":[]}`), "b")
	f.Add([]byte(`{"events":[{"type":"a","data":1,"external_id":"x"},{"type":"a","data":2,"external_id":"x"}]}`), "dup")
	f.Fuzz(func(t *testing.T, body []byte, idem string) {
		q := fuzzReq{method: "POST", path: "/v1/events/batch", body: body, scheme: "Bearer", idem: idem}
		before := fz.rows(t)
		r := fz.serve(t, q)
		var in struct{ Events []json.RawMessage }
		json.Unmarshal(body, &in)
		fieldOK := func(f string) bool {
			if m := batchField.FindStringSubmatch(f); m != nil {
				i, err := strconv.Atoi(m[1])
				return err == nil && i < len(in.Events) && fieldIn(in.Events[i], "type", "data", "external_id", "endpoint_ids")(m[2])
			}
			return fieldIn(body, "events", "body", "Idempotency-Key")(f)
		}
		if e := check(t, q, r, fieldOK); e != nil {
			fz.refused(t, q, r, before)
			return
		}
		var out struct{ Data []json.RawMessage }
		if err := json.Unmarshal(r.body, &out); err != nil || len(out.Data) != len(in.Events) {
			t.Fatalf("batch answer %s for %d events", r.body, len(in.Events))
		}
		for i, ev := range out.Data {
			var item struct{ Data json.RawMessage }
			json.Unmarshal(in.Events[i], &item)
			fz.eventReadsBack(t, ev, compact(t, item.Data))
		}
		if r.header.Get("Idempotent-Replayed") == "" && fz.rows(t).events != before.events+len(in.Events) {
			t.Fatalf("batch of %d did not add its events", len(in.Events))
		}
	})
}

var endpointFields = []string{"url", "description", "event_types", "rate_limit_per_second", "max_in_flight", "status"}

func FuzzEndpointCreate(f *testing.F) {
	fz := newFuzzer(f)
	for i, s := range []string{
		`{"url":"https://example.com/webhooks"}`,
		`{"url":"http://127.0.0.1:9/hook","description":"billing","event_types":["invoice.paid","order.created"],"rate_limit_per_second":10}`,
		`{"url":"https://user:pw@example.com/"}`, `{"url":"file:///etc/passwd"}`, `{"url":"http://127.0.0.1:9/","max_in_flight":0}`,
		`{"url":"http://127.0.0.1:9/","description":"\u0000"}`, `{"url":"http://127.0.0.1:9/","event_types":["a b"]}`,
		`{"url":"http://127.0.0.1:9/","rate_limit_per_second":1e400}`, `{"url":"http://[::1]:9/","status":"active"}`,
	} {
		f.Add([]byte(s), "e-"+strconv.Itoa(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, idem string) {
		q := fuzzReq{method: "POST", path: "/v1/endpoints", body: body, scheme: "Bearer", idem: idem}
		before := fz.rows(t)
		r := fz.serve(t, q)
		if e := check(t, q, r, fieldIn(body, append(endpointFields, "body", "Idempotency-Key")...)); e != nil {
			fz.refused(t, q, r, before)
			return
		}
		var created map[string]any
		if err := json.Unmarshal(r.body, &created); err != nil || r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		secret := created["secret"]
		delete(created, "secret")
		id, _ := created["id"].(string)
		got := fz.get(t, "/v1/endpoints/"+url.PathEscape(id))
		want, _ := json.Marshal(created)
		if !jsonEqual(got.body, want) {
			t.Fatalf("GET reads\n%s\ncreated\n%s", got.body, want)
		}
		if s := fz.get(t, "/v1/endpoints/"+id+"/secret").json(t)["secret"]; s != secret {
			t.Fatalf("GET secret %v, created with %v", s, secret)
		}
		var in struct{ URL, Description string }
		json.Unmarshal(body, &in)
		// The scheme is stored in lower case (RFC 3986 §3.1), the rest as sent.
		if i := strings.IndexByte(in.URL, ':'); i > 0 {
			in.URL = strings.ToLower(in.URL[:i]) + in.URL[i:]
		}
		if created["url"] != in.URL || created["description"] != in.Description {
			t.Fatalf("stored %s from %s", r.body, body)
		}
	})
}

func FuzzEndpointPatch(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	// {v} in If-Match is the endpoint's current version, so matching
	// versions are found as often as stale ones.
	for _, s := range []struct{ body, ifMatch string }{
		{`{"description":"new"}`, ""}, {`{"status":"disabled"}`, `"{v}"`}, {`{"status":"active"}`, "{v}"},
		{`{"event_types":["a","b.c"],"rate_limit_per_second":null}`, `W/"{v}"`}, {`{"url":"https://example.com/x"}`, `"999"`},
		{`{"max_in_flight":5,"description":null}`, "x"}, {`{"url":null}`, ""}, {`{"status":"gone"}`, ""},
		{`{"description":"\u0000"}`, ""}, {"{\"description\":\"\xff\"}", ""}, {`[]`, ""}, {``, ""},
		{`{"event_types":null}`, ""}, // once a 500: null event_types reached a NOT NULL column
	} {
		f.Add([]byte(s.body), s.ifMatch)
	}
	f.Fuzz(func(t *testing.T, body []byte, ifMatch string) {
		before := fz.get(t, "/v1/endpoints/"+ep)
		version := strconv.Itoa(int(before.json(t)["version"].(float64)))
		q := fuzzReq{method: "PATCH", path: "/v1/endpoints/" + ep, body: body, scheme: "Bearer",
			header: map[string]string{"If-Match": strings.ReplaceAll(ifMatch, "{v}", version)}}
		rowsBefore := fz.rows(t)
		r := fz.serve(t, q)
		after := fz.get(t, "/v1/endpoints/"+ep)
		if e := check(t, q, r, fieldIn(body, append(endpointFields, "body")...)); e != nil {
			fz.refused(t, q, r, rowsBefore)
			if !bytes.Equal(after.body, before.body) {
				t.Fatalf("refused PATCH changed the endpoint:\n%s\nbefore\n%s", after.body, before.body)
			}
			return
		}
		if !bytes.Equal(after.body, r.body) || after.header.Get("ETag") != r.header.Get("ETag") {
			t.Fatalf("GET reads\n%s\nPATCH answered\n%s", after.body, r.body)
		}
		if v := int(after.json(t)["version"].(float64)); strconv.Itoa(v-1) != version {
			t.Fatalf("version %d after %s", v, version)
		}
	})
}

func FuzzLists(f *testing.F) {
	fz := newFuzzer(f)
	a := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/a"})["id"].(string)
	b := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/b"})["id"].(string)
	ev, ds := fz.send("order.created", a, b)
	fz.deadLetter(ds[0])
	fz.send("user.created", a)
	for _, s := range []string{"", "limit=1", "limit=0", "limit=101", "limit=-1", "limit=1e3", "status=pending",
		"status=dead_letter&endpoint_id=" + a, "event_type=order.created&event_id=" + ev, "since=2025-01-02T15:04:05Z",
		"since=2025-01-02T15:04:05+02:00", "since=yesterday", "until=2025-01-02T15:04:05Z", "cursor=abc", "cursor=%%%",
		"endpoint_id=%00", "event_type=%FF", "limit=1&limit=2", "x=1", "cursor=ZXBfeA"} {
		for which := range uint8(3) {
			f.Add(which, s)
		}
	}
	paths := []string{"/v1/deliveries", "/v1/dead-letters", "/v1/endpoints"}
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		q := fuzzReq{method: "GET", path: paths[int(which)%len(paths)], query: query, scheme: "Bearer"}
		r := fz.serve(t, q)
		params, _ := url.ParseQuery(query)
		fieldOK := func(f string) bool { _, ok := params[f]; return ok || f == "query" }
		if check(t, q, r, fieldOK) != nil {
			return
		}
		var page struct {
			Data       []map[string]any `json:"data"`
			NextCursor *string          `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil || page.Data == nil {
			t.Fatalf("list %s: %v", r.body, err)
		}
		if page.NextCursor != nil { // the cursor the API returned reads on
			params.Set("cursor", *page.NextCursor)
			q.query = params.Encode()
			check(t, q, fz.serve(t, q), fieldOK)
		}
	})
}

func FuzzRedeliver(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	_, ds := fz.send("order.created", ep)
	_, dead := fz.send("order.created", ep)
	fz.deadLetter(dead[0])
	for _, id := range []string{ds[0], dead[0], "dlv_missing", "", "%00", "\xff", "../x"} {
		for _, body := range []string{"", "{}", `{"x":1}`, "[]", "null", "{\"\u0000\":1}"} {
			f.Add(id, []byte(body), "r-"+body)
		}
	}
	f.Fuzz(func(t *testing.T, id string, body []byte, idem string) {
		q := fuzzReq{method: "POST", path: "/v1/deliveries/" + id + "/redeliver", body: body, scheme: "Bearer", idem: idem}
		beforeRows := fz.rows(t)
		before := fz.get(t, "/v1/deliveries/"+ds[0])
		r := fz.serve(t, q)
		if check(t, q, r, fieldIn(body, "body", "Idempotency-Key")) != nil {
			fz.refused(t, q, r, beforeRows)
			if after := fz.get(t, "/v1/deliveries/"+ds[0]); !bytes.Equal(after.body, before.body) {
				t.Fatalf("refused redelivery changed the delivery:\n%s\nbefore\n%s", after.body, before.body)
			}
			return
		}
		var d struct{ ID, Status string }
		json.Unmarshal(r.body, &d)
		got := fz.get(t, "/v1/deliveries/"+d.ID)
		if got.json(t)["status"] != d.Status {
			t.Fatalf("GET reads %s; redeliver answered %s", got.body, r.body)
		}
	})
}

func FuzzReplay(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	_, dead := fz.send("order.created", ep)
	fz.deadLetter(dead[0])
	for i, s := range []string{"", "{}", `{"endpoint_id":"` + ep + `"}`, `{"event_type":"order.created","since":"2025-01-02T15:04:05Z"}`,
		`{"since":"2025-01-02T15:04:05Z","until":"2025-01-01T00:00:00Z"}`, `{"until":"never"}`, `{"event_type":"\u0000"}`,
		`{"endpoint_id":5}`, `{"status":"x"}`, "{\"event_type\":\"\xff\"}"} {
		f.Add([]byte(s), "p-"+strconv.Itoa(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, idem string) {
		q := fuzzReq{method: "POST", path: "/v1/dead-letters/replay", body: body, scheme: "Bearer", idem: idem}
		before := fz.rows(t)
		r := fz.serve(t, q)
		if check(t, q, r, fieldIn(body, "endpoint_id", "event_type", "since", "until", "body", "Idempotency-Key")) != nil {
			fz.refused(t, q, r, before)
			return
		}
		var out struct {
			JobID string `json:"job_id"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil || r.status != http.StatusAccepted {
			t.Fatalf("%d %s", r.status, r.body)
		}
		job := fz.get(t, "/v1/jobs/"+out.JobID).json(t)
		if job["id"] != out.JobID || job["kind"] != "dead_letter_replay" {
			t.Fatalf("job %v", job)
		}
	})
}

func FuzzSecret(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	for _, id := range []string{ep, "ep_missing", "", "%00", "\xff"} {
		for _, body := range []string{"", "{}", `{"x":1}`, "[]"} {
			f.Add(id, []byte(body), "s-"+body, true)
		}
		f.Add(id, []byte(nil), "", false)
	}
	f.Fuzz(func(t *testing.T, id string, body []byte, idem string, rotate bool) {
		q := fuzzReq{method: "GET", path: "/v1/endpoints/" + id + "/secret", scheme: "Bearer"}
		if rotate {
			q = fuzzReq{method: "POST", path: "/v1/endpoints/" + id + "/rotate-secret", body: body, scheme: "Bearer", idem: idem}
		}
		before := fz.get(t, "/v1/endpoints/"+ep+"/secret")
		beforeRows := fz.rows(t)
		r := fz.serve(t, q)
		if check(t, q, r, fieldIn(body, "body", "Idempotency-Key")) != nil {
			fz.refused(t, q, r, beforeRows)
			if after := fz.get(t, "/v1/endpoints/"+ep+"/secret"); !bytes.Equal(after.body, before.body) {
				t.Fatalf("refused %s changed the secret", q.method)
			}
			return
		}
		var s struct {
			Secret         string  `json:"secret"`
			PreviousSecret *string `json:"previous_secret"`
		}
		if err := json.Unmarshal(r.body, &s); err != nil || !strings.HasPrefix(s.Secret, "whsec_") {
			t.Fatalf("secret answer %s", r.body)
		}
		if rotate && id == ep && r.header.Get("Idempotent-Replayed") == "" {
			old := before.json(t)["secret"]
			if s.PreviousSecret == nil || *s.PreviousSecret != old || !bytes.Equal(bytes.TrimSpace(fz.get(t, "/v1/endpoints/"+ep+"/secret").body), r.body) {
				t.Fatalf("rotated to %s; before %s", r.body, before.body)
			}
		}
	})
}

// FuzzRoutes sends any method to any path: what no route serves is a 404
// or a 405 with Allow, in the SPEC's shape, and changes nothing.
func FuzzRoutes(f *testing.F) {
	fz := newFuzzer(f)
	ep := fz.createEndpoint(map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
	for _, s := range []struct{ method, path string }{
		{"PUT", "/v1/events"}, {"GET", "/v1/events"}, {"DELETE", "/v1/events/evt_1"}, {"POST", "/v1/endpoints/" + ep},
		{"GET", "/v1/endpoints/" + ep}, {"HEAD", "/v1/endpoints"}, {"OPTIONS", "/v1/jobs/job_1"}, {"GET", "/v2"},
		{"GET", "/v1/events/\x00"}, {"GET", "/v1/endpoints/ep_\xff/secret"}, {"TRACE", "/"}, {"GET", "//v1/events"},
		{"PATCH", "/v1/endpoints/" + ep + "/"}, {"GET", "/v1/openapi.json"}, {"BREW", "/v1/jobs"},
	} {
		f.Add(s.method, s.path, []byte("{}"))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !validMethod(method) { // net/http refuses other methods before any handler
			return
		}
		q := fuzzReq{method: method, path: path, body: body, scheme: "Bearer", idem: "routes"}
		before := fz.rows(t)
		r := fz.serve(t, q)
		e := check(t, q, r, func(string) bool { return true })
		if e != nil && e.Code != "idempotency_key_mismatch" {
			fz.refused(t, q, r, before)
		}
	})
}

// validMethod is an HTTP token (RFC 9110 §9.1).
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range []byte(m) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
