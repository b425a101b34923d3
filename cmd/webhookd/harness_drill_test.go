package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// This file is the harness of the fault drills (faults_test.go): webhookd
// processes started from this test binary, a loopback receiver, a steady
// load of events and the ledger that checks the drills' invariant —
// every event the API answered 2xx for reaches every endpoint it was meant
// for at least once; duplicates are counted and reported; nothing else
// arrives.

// drillEnv is what every drill process runs with: short HTTP timeouts and
// a long schedule of 1 s retries, so that a failure is retried soon and no
// delivery becomes a dead letter within a drill.
var drillEnv = []string{
	"WEBHOOKD_CONNECT_TIMEOUT=1s", "WEBHOOKD_RESPONSE_TIMEOUT=2s",
	"WEBHOOKD_RETRY_SCHEDULE=" + strings.TrimSuffix(strings.Repeat("1s,", 60), ","),
	"WEBHOOKD_RECONCILE_INTERVAL=1s",
	// The breaker off: a drill's receiver keeps failing through the
	// ledger's wait (TestReceiverFlapping flaps to the end), and an open
	// circuit rightly lets a delivery outlive this 60 s schedule's window
	// as a dead letter, which the ledger counts as not received. The
	// breaker's own behaviour is proved in dispatcher/lifecycle_test.go.
	"WEBHOOKD_CIRCUIT_AFTER=0",
}

// proc is one webhookd process started from this test binary.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it has exited (cmd.ProcessState is set)
	logs   lockedBuffer
}

// startProcess starts this binary as `webhookd command` on dbURL and
// redisURL with private networks allowed and env added. The test kills it
// when it ends and shows its log if the test failed.
func startProcess(t *testing.T, command, dbURL, redisURL string, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], command), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1", "WEBHOOKD_DATABASE_URL="+dbURL, "WEBHOOKD_REDIS_URL="+redisURL,
		"WEBHOOKD_ALLOW_PRIVATE_NETWORKS=true", "WEBHOOKD_DASHBOARD_ADDR=127.0.0.1:0") // every process kind has a health listener
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, &p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("webhookd %s (pid %d) log:\n%s", command, p.cmd.Process.Pid, p.logs.String())
		}
	})
	return p
}

// attemptRequestIDs are the request ids of the attempts a worker logged.
func (p *proc) attemptRequestIDs() map[string]bool {
	ids := map[string]bool{}
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, "delivery attempt") {
			continue
		}
		if m := requestIDField.FindStringSubmatch(line); m != nil {
			ids[m[1]] = true
		}
	}
	return ids
}

// requestIDField finds request_id in a text or a JSON log line.
var requestIDField = regexp.MustCompile(`"?request_id"?[=:]"?(req_[0-9A-Za-z]+)`)

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// waitFor polls cond every 50 ms (the drills' conditions query the
// database) until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitEvery(t, 50*time.Millisecond, limit, what, cond)
}

// drill is one fault drill's receiver, API and ledger.
type drill struct {
	t      *testing.T
	db     *storage.DB
	dbURL  string
	key    string // API key of the drill's project
	projID string
	base   string // the receiver's URL; endpoints are at paths under it
	api    string // http://host:port of the API process
	client *http.Client

	// down is set while a drill keeps PostgreSQL down: a POST sent and
	// answered within that time must get 503.
	down atomic.Bool

	// answer answers one delivery request; it reports whether it answered
	// 2xx (a delivery only counts as received then). Default: 204.
	answer func(w http.ResponseWriter, r *http.Request) bool

	mu        sync.Mutex
	endpoints map[string]string // endpoint id → its path on the receiver
	want      map[string]string // "path event_id" the API accepted → delivery id
	got       map[string]int    // "path event_id" → 2xx answers
	requests  []received        // every request the receiver answered 2xx
	statuses  map[int]int       // answers to the load's POSTs by status
	refused   []refusal         // POSTs of events that got 503
	stopLoad  func()            // stops startLoad's load once the last answer is in
}

// refusal is an event POST that got 503: its key and the n of its body.
type refusal struct {
	key string
	n   int
}

// received is one delivery request the receiver answered 2xx.
type received struct{ key, requestID string }

// newDrill migrates the database at dbURL (its search_path, if any, names
// the schema), makes a project and its key, and starts a receiver.
func newDrill(t *testing.T, dbURL string) *drill {
	t.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key, p, err := db.Store().CreateAPIKey(ctx, "drill", storage.ProjectPlan{RateLimitPerMinute: 1000000})
	if err != nil {
		t.Fatal(err)
	}
	d := &drill{t: t, db: db, dbURL: dbURL, key: key, projID: p.ID, client: &http.Client{Timeout: 40 * time.Second},
		endpoints: map[string]string{}, want: map[string]string{}, got: map[string]int{}, statuses: map[int]int{}}
	rc := httptest.NewServer(http.HandlerFunc(d.receive))
	t.Cleanup(rc.Close)
	d.base = rc.URL
	return d
}

func (d *drill) receive(w http.ResponseWriter, r *http.Request) {
	// With the body read, the server watches the connection: a sender that
	// goes away cancels r.Context(), and an answer the sender never saw is
	// not counted.
	io.Copy(io.Discard, r.Body)
	answer := d.answer
	if answer == nil {
		answer = func(w http.ResponseWriter, r *http.Request) bool { w.WriteHeader(http.StatusNoContent); return true }
	}
	if !answer(w, r) {
		return
	}
	k := r.URL.Path + " " + r.Header.Get("webhook-id")
	d.mu.Lock()
	d.got[k]++
	d.requests = append(d.requests, received{k, r.Header.Get("X-Request-Id")})
	d.mu.Unlock()
}

// startAPI starts `webhookd serve` on a free port with env and waits until
// it listens.
func (d *drill) startAPI(redisURL string, env ...string) *proc {
	d.t.Helper()
	addr := "127.0.0.1:" + freePort(d.t)
	p := startProcess(d.t, "serve", d.dbURL, redisURL, append(append([]string{"WEBHOOKD_API_ADDR=" + addr}, drillEnv...), env...)...)
	d.api = "http://" + addr
	waitFor(d.t, 20*time.Second, "webhookd serve listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// startWorker starts `webhookd worker` with the drill settings and env.
func (d *drill) startWorker(redisURL string, env ...string) *proc {
	d.t.Helper()
	return startProcess(d.t, "worker", d.dbURL, redisURL, append(append([]string(nil), drillEnv...), env...)...)
}

// post sends one POST with Idempotency-Key idem and returns the status, the
// headers and the decoded body; a transport error is status 0.
func (d *drill) post(path, idem, body string) (int, http.Header, map[string]any) {
	req, _ := http.NewRequest("POST", d.api+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem)
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Logf("POST %s: %v", path, err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// addEndpoints creates n endpoints at paths /ep/0… of the receiver.
func (d *drill) addEndpoints(n int) {
	d.t.Helper()
	for i := range n {
		path := "/ep/" + strconv.Itoa(i)
		status, _, out := d.post("/v1/endpoints", uuid.NewString(), fmt.Sprintf(`{"url":%q}`, d.base+path))
		if status != http.StatusCreated {
			d.t.Fatalf("POST /v1/endpoints: %d %v", status, out)
		}
		d.mu.Lock()
		d.endpoints[out["id"].(string)] = path
		d.mu.Unlock()
	}
}

// sendEvent posts one event with Idempotency-Key idem, counts the answer
// and, when it is 2xx, adds the event's deliveries to the ledger. A 503
// must carry Retry-After; any other 5xx fails the test. It returns the
// status and whether the answer was a replay.
func (d *drill) sendEvent(idem string, n int) (int, bool) {
	wasDown := d.down.Load()
	status, h, out := d.post("/v1/events", idem, `{"type":"drill.tick","data":{"n":`+strconv.Itoa(n)+`}}`)
	if wasDown && d.down.Load() && status != http.StatusServiceUnavailable {
		d.t.Errorf("POST /v1/events (key %s) sent and answered while PostgreSQL was down: %d %v; want 503", idem, status, out)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statuses[status]++
	switch {
	case status >= 200 && status < 300:
		ev, _ := out["id"].(string)
		dlvs, _ := out["deliveries"].([]any)
		if ev == "" || len(dlvs) != len(d.endpoints) {
			d.t.Errorf("event answer %d %v: want an id and %d deliveries", status, out, len(d.endpoints))
		}
		for _, x := range dlvs {
			dl, _ := x.(map[string]any)
			ep, _ := dl["endpoint_id"].(string)
			id, _ := dl["id"].(string)
			d.want[d.endpoints[ep]+" "+ev] = id
		}
	case status == http.StatusServiceUnavailable:
		if h.Get("Retry-After") == "" {
			d.t.Errorf("503 without Retry-After (key %s): %v", idem, out)
		}
		d.refused = append(d.refused, refusal{idem, n})
	case status >= 500:
		d.t.Errorf("POST /v1/events answered %d (key %s): %v; want 2xx or 503", status, idem, out)
	case status == 0:
		d.t.Errorf("POST /v1/events got no answer (key %s)", idem)
	}
	return status, h != nil && h.Get("Idempotent-Replayed") == "true"
}

// startLoad posts one event every interval until stopLoad, or until the
// test ends: a drill that fails before its stopLoad must not leave posts
// that report to a finished test (a panic that takes the package down).
func (d *drill) startLoad(interval time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	d.stopLoad = sync.OnceFunc(func() { close(stop); <-done })
	d.t.Cleanup(d.stopLoad)
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() { defer wg.Done(); d.sendEvent(uuid.NewString(), n) }()
		}
	}()
}

// carryOn waits until the receiver has got n more of the accepted
// deliveries than it has now.
func (d *drill) carryOn(n int, what string) {
	d.t.Helper()
	before := d.deliveredCount()
	waitFor(d.t, 30*time.Second, fmt.Sprintf("%d more deliveries %s", n, what), func() bool { return d.deliveredCount() >= before+n })
}

// accepted is how many deliveries the API has accepted so far.
func (d *drill) accepted() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.want)
}

// deliveredCount is how many accepted deliveries the receiver answered 2xx.
func (d *drill) deliveredCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k := range d.want {
		if d.got[k] > 0 {
			n++
		}
	}
	return n
}

// verify waits up to limit for every accepted delivery to reach its
// endpoint, then checks that nothing else arrived and reports duplicates.
func (d *drill) verify(limit time.Duration) (duplicates int) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		n, total := d.deliveredCount(), d.accepted()
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			d.mu.Lock()
			var missing []string
			for k, id := range d.want {
				if d.got[k] == 0 && len(missing) < 10 {
					dl, err := d.db.Store().GetDelivery(context.Background(), d.projID, id)
					missing = append(missing, fmt.Sprintf("%s (%s: %s, %d attempts, next %v, %v)", k, id, dl.Status,
						dl.AttemptsCount, dl.NextAttemptAt, err))
				}
			}
			d.mu.Unlock()
			sort.Strings(missing)
			d.t.Fatalf("%d of %d accepted deliveries never reached their endpoint within %v; some: %v",
				total-n, total, limit, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dup, extra := 0, 0
	for k, n := range d.got {
		if _, ok := d.want[k]; !ok {
			d.t.Errorf("the receiver got %s, which the API never accepted", k)
		}
		if n > 1 {
			dup++
			extra += n - 1
		}
	}
	d.t.Logf("ledger: %d deliveries accepted (answers by status %v), all received; %d received more than once (%d extra requests)",
		len(d.want), d.statuses, dup, extra)
	return dup
}

// workerID reads a worker process's id from its log's "worker started"
// line, waiting for it.
func workerID(t *testing.T, p *proc) string {
	t.Helper()
	var id string
	waitFor(t, 20*time.Second, "the worker's id in its log", func() bool {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			if i := strings.Index(line, `"worker_id":"`); i >= 0 {
				rest := line[i+len(`"worker_id":"`):]
				id = rest[:strings.IndexByte(rest, '"')]
				return true
			}
		}
		return false
	})
	return id
}

// reopenable returns a function that starts srv on addr (again, after its
// listener was closed) and returns the new listener: a receiver whose
// port can close and open.
func reopenable(t *testing.T, srv *http.Server, addr string) func() net.Listener {
	return func() net.Listener {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		return ln
	}
}
