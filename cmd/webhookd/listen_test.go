package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/webhookd/webhookd/wire"
)

// listenProcess is a `webhookd listen` running as a process of its own.
type listenProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan error
}

// lockedWriter appends to a buffer under the process's lock.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// startListen starts `webhookd listen args...` against the API at addr
// with key, and waits until its stream is connected.
func startListen(t *testing.T, addr, key string, args ...string) *listenProcess {
	t.Helper()
	p := &listenProcess{done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], append([]string{"listen"}, args...)...)
	p.cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1", "WEBHOOKD_API_URL=http://"+addr, "WEBHOOKD_API_KEY="+key)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{&p.mu, &p.stdout}, lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("webhookd listen %s printed:\n%s", strings.Join(args, " "), p.output())
		}
	})
	poll(t, "listen connected", func() bool { return strings.Contains(p.output(), "webhookd: listen: connected") })
	return p
}

// output is what the process printed so far, stdout then stderr.
func (p *listenProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

// stop sends sig and returns the exit code.
func (p *listenProcess) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("listen did not exit within 10s of %v", sig)
	}
	p.done <- nil // for the cleanup
	return p.cmd.ProcessState.ExitCode()
}

// poll waits for cond, checking every 10 ms, failing after 20 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// localRequest is one request the local receiver got.
type localRequest struct {
	at     time.Time
	header http.Header
	body   []byte
}

// TestListenForwardsSignedDeliveriesAndLosesNone runs `webhookd listen`
// against a real `webhookd all` and a local receiver: deliveries arrive
// signed as for an HTTP endpoint and the local answer is recorded as the
// attempt; while no listen is connected (stopped with SIGINT, or killed)
// deliveries wait without attempts (circuit_open) and flow when one
// connects again; two listens share a relay's deliveries.
func TestListenForwardsSignedDeliveriesAndLosesNone(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.RetrySchedule = "1s,1s,1s,1m" // a window of a minute: deliveries may wait that long for a listen
	})
	call := func(method, path, body string, idem bool) map[string]any {
		t.Helper()
		return callAPI(t, m.APIAddr, key, method, path, body, idem)
	}

	var mu sync.Mutex
	got := map[string][]localRequest{} // by event id
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Header.Get("webhook-id")] = append(got[r.Header.Get("webhook-id")], localRequest{time.Now(), r.Header.Clone(), b})
		mu.Unlock()
		w.Header().Set("X-Local", "laptop")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok from the laptop")
	}))
	t.Cleanup(rc.Close)
	arrived := func(id string) []localRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got[id])
	}
	listenArgs := []string{"--forward-to", rc.URL + "/hooks", "--events", "invoice.paid,invoice.voided"}

	a := startListen(t, m.APIAddr, key, listenArgs...)
	var ep map[string]any
	for _, e := range call("GET", "/v1/endpoints", "", false)["data"].([]any) {
		if e := e.(map[string]any); e["url"] == "relay://listen" {
			ep = e
		}
	}
	if ep == nil || fmt.Sprint(ep["event_types"]) != "[invoice.paid invoice.voided]" || ep["status"] != "active" {
		t.Fatalf("relay endpoint %v", ep)
	}
	secret := call("GET", "/v1/endpoints/"+ep["id"].(string)+"/secret", "", false)["secret"].(string)

	// send posts an event and returns its id, its delivery's id and when
	// its 202 arrived.
	send := func(data string) (evt, dlv string, accepted time.Time) {
		t.Helper()
		ev := call("POST", "/v1/events", `{"type":"invoice.paid","data":`+data+`}`, true)
		accepted = time.Now()
		return ev["id"].(string), ev["deliveries"].([]any)[0].(map[string]any)["id"].(string), accepted
	}
	delivery := func(id string) map[string]any { return call("GET", "/v1/deliveries/"+id, "", false) }
	succeeded := func(dlv string) {
		t.Helper()
		poll(t, "delivery "+dlv+" succeeded", func() bool { return delivery(dlv)["status"] == "succeeded" })
	}

	// Forwarded while listen runs, within a second of the 202; signed.
	var latencies []time.Duration
	var first, firstDlv string
	for i := range 5 {
		evt, dlv, accepted := send(`{"n":` + strconv.Itoa(i) + `}`)
		poll(t, "event "+evt+" at the receiver", func() bool { return len(arrived(evt)) > 0 })
		latencies = append(latencies, arrived(evt)[0].at.Sub(accepted))
		if i == 0 {
			first, firstDlv = evt, dlv
		}
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("first forward after the 202 (5 events, loopback): min %s, median %s, max %s", latencies[0], latencies[2], latencies[4])
	if latencies[2] > time.Second {
		t.Errorf("median first forward %s after the 202, want within 1s", latencies[2])
	}
	r := arrived(first)[0]
	ts, _ := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	want, err := wire.Sign(secret, first, time.Unix(ts, 0), r.body)
	if err != nil || r.header.Get("webhook-signature") != want {
		t.Fatalf("signature %q, want %q (%v)", r.header.Get("webhook-signature"), want, err)
	}
	wh, _ := standardwebhooks.NewWebhook(secret)
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Fatalf("standard webhooks: %v", err)
	}
	if r.header.Get("X-Event-Type") != "invoice.paid" || r.header.Get("X-Delivery-Attempt") != "1" ||
		!strings.HasPrefix(r.header.Get("X-Request-Id"), "req_") || !strings.HasPrefix(r.header.Get("User-Agent"), "webhookd/") {
		t.Fatalf("headers %v", r.header)
	}
	succeeded(firstDlv)
	d := delivery(firstDlv)
	at := d["attempts"].([]any)
	if len(at) != 1 {
		t.Fatalf("attempts %v", at)
	}
	att := at[0].(map[string]any)
	if att["status_code"] != 200.0 || att["response_body"] != "ok from the laptop" || att["url"] != "relay://listen" ||
		att["response_headers"].(map[string]any)["X-Local"] != "laptop" {
		t.Fatalf("attempt %v", att)
	}

	// Stopped with SIGINT: exit 0, one line per forwarded delivery.
	if code := a.stop(t, syscall.SIGINT); code != 0 {
		t.Fatalf("listen exit %d after SIGINT:\n%s", code, a.output())
	}
	if lines := strings.Count(a.stdout.String(), "invoice.paid"); lines != 5 || !strings.Contains(a.stdout.String(), first+"  attempt 1  -> 200") {
		t.Fatalf("listen printed %d delivery lines, want 5:\n%s", lines, a.stdout.String())
	}

	// waitNone posts n events while nobody listens and checks that each
	// waits for a listener without spending an attempt.
	waitNone := func(n int) []string {
		t.Helper()
		var evts []string
		for i := range n {
			evt, dlv, _ := send(`{"while":"nobody listens","i":` + strconv.Itoa(i) + `}`)
			evts = append(evts, evt)
			var d map[string]any
			defer func() {
				if t.Failed() {
					t.Logf("delivery %v", d)
				}
			}()
			poll(t, "delivery "+dlv+" waiting for a listener", func() bool {
				d = delivery(dlv)
				return d["waiting_reason"] == "circuit_open" && d["attempts_count"] == 0.0 && d["status"] == "pending"
			})
		}
		return evts
	}
	// flow waits until each event reached the receiver and its answer is
	// recorded: a listen killed after the receiver answered but before
	// the answer crossed the stream costs that delivery an attempt (the
	// receiver then gets it again, as at-least-once says), which is not
	// what this test counts.
	flow := func(evts []string) {
		t.Helper()
		for _, evt := range evts {
			poll(t, "event "+evt+" forwarded once a listen connected, and its answer recorded", func() bool {
				if len(arrived(evt)) == 0 {
					return false
				}
				var ok bool
				err := m.DB.Pool().QueryRow(t.Context(), `SELECT status = 'succeeded' FROM deliveries WHERE event_id = $1`, evt).
					Scan(&ok)
				return err == nil && ok
			})
		}
	}

	// Restarted: what waited flows.
	waiting := waitNone(3)
	b := startListen(t, m.APIAddr, key, listenArgs...)
	flow(waiting)

	// Killed: the stream's end says nobody listens at once; two listens
	// started after share the relay.
	b.stop(t, syscall.SIGKILL)
	waiting = waitNone(2)
	c1 := startListen(t, m.APIAddr, key, listenArgs...)
	c2 := startListen(t, m.APIAddr, key, listenArgs...)
	flow(waiting)
	var more []string
	for i := range 6 {
		evt, _, _ := send(`{"shared":` + strconv.Itoa(i) + `}`)
		more = append(more, evt)
	}
	flow(more)
	t.Logf("two listens shared 8 deliveries: %d and %d", strings.Count(c1.output(), "attempt "), strings.Count(c2.output(), "attempt "))

	// Every delivery of the relay succeeded at its first attempt: none was
	// spent while nobody listened.
	var done, spent int
	poll(t, "16 deliveries succeeded", func() bool {
		err := m.DB.Pool().QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'succeeded'),
			count(*) FILTER (WHERE attempts_count <> 1) FROM deliveries`).Scan(&done, &spent)
		return err == nil && done == 16
	})
	if spent != 0 {
		t.Fatalf("%d deliveries took more than one attempt", spent)
	}
}
