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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/archive"
)

// TestArchiveShowAndReplay runs webhookd in-process: a delivery becomes a
// dead letter, its day is archived, and then, from the archive alone,
// `archive list` shows the archive verified, `archive show` prints the dead
// letter with its delivery, event and attempts, and `archive replay` sends
// the event again through the API to the endpoint, whose receiver gets it.
func TestArchiveShowAndReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.ArchiveDir = true, dir
	})
	if m.Archiver == nil || m.Archiver.Dir() != dir {
		t.Fatalf("the worker has no archiver of %s", dir)
	}
	var mu sync.Mutex
	answer := 400
	var bodies []string
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		w.WriteHeader(answer)
	}))
	t.Cleanup(rc.Close)
	call := func(method, path, body string) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, true)
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
		}
	}

	ep := call("POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL+"/hook"))
	epID, secret := ep["id"].(string), ep["secret"].(string)
	ev := call("POST", "/v1/events", `{"type":"order.paid","data":{"order":7}}`)
	dlv := ev["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	poll("dead letter", func() bool {
		return callAPI(t, m.APIAddr, key, "GET", "/v1/deliveries/"+dlv, "", false)["status"] == "dead_letter"
	})
	var dlID string
	if err := m.DB.Pool().QueryRow(t.Context(), `SELECT id FROM dead_letters WHERE delivery_id = $1`, dlv).Scan(&dlID); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	am, err := m.Archiver.Archive(t.Context(), day, day.Add(24*time.Hour))
	if err != nil || am.Rows("dead_letters") != 1 {
		t.Fatalf("archive: %+v, %v", am, err)
	}
	// The write is in the process's metrics, beside the others, and in
	// /readyz.
	if s := scrape(t, m.OpsAddr); s["webhookd_archive_last_success_timestamp_seconds"] < float64(day.Unix()) ||
		s["webhookd_archive_failures_total"] != 0 {
		t.Fatalf("archive metrics: last success %v, failures %v", s["webhookd_archive_last_success_timestamp_seconds"],
			s["webhookd_archive_failures_total"])
	}
	if code, _, body := get(t, "http://"+m.OpsAddr+"/readyz"); code != 200 || !strings.Contains(body, `"archive":{"status":"ok","since":"`) {
		t.Fatalf("/readyz after an archive: %d %s", code, body)
	}
	mu.Lock()
	answer = 200
	mu.Unlock()

	// From the archive alone: the database URL points nowhere.
	vars := map[string]string{"WEBHOOKD_ARCHIVE_DIR": dir, "WEBHOOKD_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
		"WEBHOOKD_API_URL": "http://" + m.APIAddr, "WEBHOOKD_API_KEY": key}
	runCLI := func(args ...string) (stdout, stderr string, code int) { return cliRun(vars, args...) }
	out, errOut, code := runCLI("archive", "list")
	if code != 0 || !strings.Contains(out, am.ID) || !strings.Contains(out, "yes") {
		t.Fatalf("archive list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runCLI("archive", "show", dlID)
	var shown archive.Record
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("archive show: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var event struct {
		Data struct{ Order int }
	}
	if json.Unmarshal(shown.Event, &event) != nil || event.Data.Order != 7 || !bytes.Contains(shown.Delivery, []byte(dlv)) ||
		len(shown.Attempts) != 1 || !bytes.Contains(shown.DeadLetter, []byte(`"client_error"`)) {
		t.Fatalf("archive show %s: %s", dlID, out)
	}
	if strings.Contains(out, secret) {
		t.Fatal("archive show printed the endpoint's secret")
	}
	if out2, _, _ := runCLI("archive", "show", dlv); out2 != out {
		t.Fatalf("show by delivery id differs from show by dead letter id:\n%s\n%s", out2, out)
	}

	out, errOut, code = runCLI("archive", "replay", dlID)
	if code != 0 || !strings.HasPrefix(out, "replayed "+dlID) {
		t.Fatalf("archive replay: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	poll("the replayed event at the receiver", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 2
	})
	mu.Lock()
	replayed := bodies[1]
	mu.Unlock()
	if !strings.Contains(replayed, `"type":"order.paid"`) || !strings.Contains(replayed, `"order":7`) ||
		strings.Contains(replayed, ev["id"].(string)) {
		t.Fatalf("the receiver got %s: want a new event of the archived type and data", replayed)
	}
	// Again: the same Idempotency-Key, so the same event, nothing new sent.
	again, _, code := runCLI("archive", "replay", dlID)
	if code != 0 || again != out {
		t.Fatalf("replay again: exit %d, %q; want %q", code, again, out)
	}

	// Bad input: a clear error, the exit code of its kind, nothing sent.
	callAPI(t, m.APIAddr, key, "DELETE", "/v1/endpoints/"+epID, "", false)
	for _, c := range []struct {
		args []string
		vars map[string]string
		code int
		want string
	}{
		{[]string{"archive", "replay", dlID}, nil, 1, "endpoint " + epID + " no longer exists"},
		{[]string{"archive", "replay", dlv}, nil, 2, "is not a dead letter id"},
		{[]string{"archive", "replay"}, nil, 2, "want DEAD_LETTER_ID"},
		{[]string{"archive", "show", "evt_01ARZ3NDEKTSV4RRFFQ69G5FAV"}, nil, 2, "want a delivery id (dlv_...) or a dead letter id"},
		{[]string{"archive", "show", "dl_01ARZ3NDEKTSV4RRFFQ69G5FAV"}, nil, 1, "not found in any archive"},
		{[]string{"archive", "show", dlID}, map[string]string{"WEBHOOKD_ARCHIVE_DIR": ""}, 2, "no archive directory"},
		{[]string{"archive", "list", "--archive-dir", filepath.Join(dir, "nope")}, nil, 2, "no such file or directory"},
		{[]string{"archive", "replay", dlID}, map[string]string{"WEBHOOKD_API_KEY": ""}, 2, "no API key"},
		{[]string{"archive", "frobnicate"}, nil, 2, "usage: webhookd archive list"},
	} {
		saved := map[string]string{}
		for k, v := range c.vars {
			saved[k], vars[k] = vars[k], v
		}
		out, errOut, code := runCLI(c.args...)
		for k, v := range saved {
			vars[k] = v
		}
		if code != c.code || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
		checkErrorForm(t, c.args, errOut)
	}
	mu.Lock()
	if len(bodies) != 2 {
		t.Errorf("the receiver got %d requests, want 2: a refused replay must send nothing", len(bodies))
	}
	mu.Unlock()

	// A corrupted archive: list says which, and exits 1.
	path := filepath.Join(dir, am.ID, "events.ndjson.gz")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI("archive", "list")
	if code != 1 || !strings.Contains(out, "NO") || !strings.Contains(errOut, "events.ndjson.gz") {
		t.Fatalf("list of a corrupted archive: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
