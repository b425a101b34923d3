package api

import (
	"strings"
	"testing"
)

// BenchmarkParseBatch parses a batch of 1,000 events as POST
// /v1/events/batch does, before any storage work.
func BenchmarkParseBatch(b *testing.B) {
	item := `{"type":"order.created","data":{"id":42,"items":[1,2,3],"total":"9.99","note":"a \u00e9 b"}}`
	body := []byte(`{"events":[` + strings.TrimSuffix(strings.Repeat(item+",", 1000), ",") + `]}`)
	s := newEventChecker(nil, 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := s.parseEvents(body, true); err != nil {
			b.Fatal(err)
		}
	}
}
