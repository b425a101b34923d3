package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd/storage"
)

// BenchmarkIngest posts events through the real HTTP handler into
// PostgreSQL (event, deliveries to 3 endpoints and the idempotency record
// in one transaction), with the rate limiter on Redis.
func BenchmarkIngest(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			h := newHarness(b)
			for i := range 3 {
				h.createEndpoint(map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/%d", i)})
			}
			h.newKey("main", storage.ProjectPlan{RateLimitPerMinute: 1 << 30})
			benchIngest(b, h, size)
		})
	}
}

func benchIngest(b *testing.B, h *harness, size int) {
	path, body := "/v1/events", []byte(`{"type":"order.created","data":{"id":42,"items":[1,2,3],"total":"9.99"}}`)
	if size > 1 {
		items := make([]string, size)
		for i := range items {
			items[i] = string(body)
		}
		path, body = "/v1/events/batch", []byte(`{"events":[`+strings.Join(items, ",")+`]}`)
	}
	client := h.srv.Client()
	b.SetParallelism(8) // 16 clients on 2 cores: throughput, not one client's latency
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _ := http.NewRequest("POST", h.srv.URL+path, bytes.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+h.key)
			r.Header.Set("Idempotency-Key", uuid.NewString())
			resp, err := client.Do(r)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
}
