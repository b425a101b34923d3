package storage

import (
	"bytes"
	"encoding/json"
	"testing"
)

// headersJSONCases are maps whose encodings must read back as encoding/json's do.
var headersJSONCases = []map[string]string{
	nil,
	{},
	{"Content-Type": "application/json"},
	{"b": "2", "a": "1", "C": "3"},
	{"quote": `say "hi"`, "back\\slash": `a\b`, "ctl": "\x00\x01\x1f\x7f", "ws": "\t\r\n"},
	{"utf8": "héllo, 世界", "bad": "a\xffb\xc3", "sep": "\u2028\u2029", "html": "<a href='x'>&</a>"},
}

func TestAppendHeadersJSONReadsBackAsEncodingJSON(t *testing.T) {
	for _, h := range headersJSONCases {
		checkHeadersJSON(t, h)
	}
}

func checkHeadersJSON(t *testing.T, h map[string]string) {
	t.Helper()
	got := appendHeadersJSON(nil, h)
	want, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		want = []byte("{}") // an attempt's maps are never nil; {} is what the column wants
	}
	var g, w map[string]string
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%q: not JSON: %v (%s)", h, err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) || len(g) != len(w) {
		t.Fatalf("%q: got %s, want %s", h, got, want)
	}
	for k, v := range w {
		if g[k] != v {
			t.Fatalf("%q: key %q reads back %q, want %q (got %s)", h, k, g[k], v, got)
		}
	}
	if bytes.ContainsAny(got, "\x00\n") {
		t.Fatalf("%q: raw control characters in %s", h, got)
	}
}

func FuzzAppendHeadersJSON(f *testing.F) {
	f.Add("Content-Type", "text/plain", "x", "\xff")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		checkHeadersJSON(t, map[string]string{k1: v1, k2: v2})
	})
}

func BenchmarkHeadersJSON(b *testing.B) {
	h := map[string]string{"Content-Type": "application/json", "User-Agent": "webhookd/1", "Webhook-Id": "evt_01JBENCH",
		"Webhook-Timestamp": "1700000000", "Webhook-Signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(h)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = appendHeadersJSON(nil, h)
		}
	})
}
