package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSendBulkDeliversEveryLineOnce posts a file of a few thousand lines
// with `webhookd send --bulk` to a service with a worker: the job id comes
// alone on stdout, progress on stderr, the refused line is listed with its
// number, and every accepted line is delivered once.
func TestSendBulkDeliversEveryLineOnce(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true}, func(c *Config) { c.AllowPrivateNetworks = true })
	var (
		mu   sync.Mutex
		seen = map[int]int{} // data.n → deliveries
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Data struct {
				N int `json:"n"`
			} `json:"data"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Errorf("delivery body %s: %v", b, err)
		}
		mu.Lock()
		seen[ev.Data.N]++
		mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/hook"), true)

	const n = 2500
	var body bytes.Buffer
	for i := 1; i <= n; i++ {
		if i == 1234 {
			body.WriteString(`{"type":"bulk.item","data":{"n":1234},"external_id":""}` + "\n") // refused: empty external id
			continue
		}
		fmt.Fprintf(&body, `{"type":"bulk.item","data":{"n":%d}}`+"\n", i)
	}
	file := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(file, body.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"WEBHOOKD_API_URL=http://" + m.APIAddr, "WEBHOOKD_API_KEY=" + key}
	out, errOut, code := sendProcess(t, env, "--bulk", file)
	if code != 0 || !regexp.MustCompile(`^job_[0-9A-Z]{26}\n$`).MatchString(out) {
		t.Fatalf("send --bulk: exit %d, stdout %q, stderr %q; want the job id alone", code, out, errOut)
	}
	if !strings.Contains(errOut, "succeeded: 2499 of 2500 accepted, 1 refused") ||
		!strings.Contains(errOut, "line 1234 refused: validation_failed") {
		t.Fatalf("send --bulk stderr:\n%s", errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines delivered within 30s", got, n-1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i <= n; i++ {
		if want := map[bool]int{true: 0, false: 1}[i == 1234]; seen[i] != want {
			t.Fatalf("line %d delivered %d times, want %d", i, seen[i], want)
		}
	}
}
