package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestBulkFirstDeliveryFollowsThe202: a 2,000-line bulk job's first
// delivery reaches its endpoint soon after the 202 (issue 35's target is
// 1 s; the bound here is 5 s, for a loaded CI machine): the job is handed
// to a worker after the upload's commit and its first chunk's deliveries
// are enqueued as that chunk commits, not when the job ends.
func TestBulkFirstDeliveryFollowsThe202(t *testing.T) {
	t.Parallel()
	first := make(chan time.Time, 1)
	var once sync.Once
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { first <- time.Now() })
	}))
	defer rc.Close()
	m, key := startMain(t, Roles{API: true, Worker: true}, func(c *Config) { c.AllowPrivateNetworks = true })
	callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", `{"url":"`+rc.URL+`"}`, true)

	const lines = 2000
	var body strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&body, `{"type":"contact.updated","data":{"n":%d}}`+"\n", i)
	}
	req, _ := http.NewRequest("POST", "http://"+m.APIAddr+"/v1/events/bulk", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	accepted := time.Now()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/events/bulk: %d", resp.StatusCode)
	}
	select {
	case at := <-first:
		t.Logf("first delivery %v after the 202", at.Sub(accepted))
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5 s of the 202")
	}
}
