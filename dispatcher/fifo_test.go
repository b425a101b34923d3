package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dispatcher"
	"github.com/webhookd/webhookd/storage"
)

// orderedReceiver records the event numbers ("n" in the data) an ordered
// endpoint gets, in the order of the requests, and the most requests it
// had in flight at once. fail says whether to answer a request with 500.
type orderedReceiver struct {
	*receiver
	inFlight, most atomic.Int32
	mu             sync.Mutex
	seq            []int        // n of every request, in arrival order
	ok             map[int]bool // the events answered 200
}

func newOrderedReceiver(t *testing.T, fail func(n, try int) bool) *orderedReceiver {
	o := &orderedReceiver{ok: map[int]bool{}}
	tries := map[int]int{}
	o.receiver = newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		now := o.inFlight.Add(1)
		defer o.inFlight.Add(-1)
		for m := o.most.Load(); now > m && !o.most.CompareAndSwap(m, now); m = o.most.Load() {
		}
		o.mu.Lock()
		got := o.got[len(o.got)-1].body // the body of this request: receiver appends before answering
		var msg struct {
			Data struct{ N int } `json:"data"`
		}
		json.Unmarshal(got, &msg)
		n := msg.Data.N
		o.seq = append(o.seq, n)
		tries[n]++
		bad := fail(n, tries[n])
		if !bad {
			o.ok[n] = true
		}
		o.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // long enough for a second attempt to overlap, were one let go
		if bad {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return o
}

func (o *orderedReceiver) delivered() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ok)
}

// checkOrder fails t unless the requests came one at a time and in order:
// the numbers never go down (a retry repeats one, the next follows it).
func (o *orderedReceiver) checkOrder(t *testing.T, want int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if m := o.most.Load(); m != 1 {
		t.Errorf("the ordered endpoint had %d requests in flight at once, want 1", m)
	}
	for i := 1; i < len(o.seq); i++ {
		if o.seq[i] < o.seq[i-1] {
			t.Fatalf("request %d was for event %d after one for event %d: out of order (%v…)", i, o.seq[i], o.seq[i-1],
				o.seq[max(0, i-5):min(len(o.seq), i+5)])
		}
	}
	for n := range want {
		if !o.ok[n] {
			t.Fatalf("event %d never got through", n)
		}
	}
	t.Logf("%d events in %d requests, in order, one at a time", want, len(o.seq))
}

// publishNumbered ingests events numbered from..to-1 in batches of batch,
// each batch one acceptance, and enqueues their deliveries as the API does.
func (e *env) publishNumbered(typ string, from, to, batch int) {
	e.t.Helper()
	for lo := from; lo < to; lo += batch {
		var evs []storage.NewEvent
		for n := lo; n < min(lo+batch, to); n++ {
			evs = append(evs, storage.NewEvent{Type: typ, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
		}
		now := time.Now()
		out, err := e.db.Store().CreateEvents(context.Background(), e.project.ID, evs, now, func(int) string { return "" })
		if err != nil {
			e.t.Fatal(err)
		}
		var due []webhookd.ScheduledDelivery
		for _, ev := range out {
			for _, d := range ev.Deliveries {
				due = append(due, webhookd.ScheduledDelivery{ID: d.ID, EndpointID: d.EndpointID, DueAt: now})
			}
		}
		if err := e.worker.Queue.Enqueue(context.Background(), due...); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) orderedEndpoint(url string) webhookd.Endpoint {
	e.t.Helper()
	ep, err := e.db.Store().CreateEndpoint(context.Background(), e.project.ID,
		storage.NewEndpoint{URL: url, Secret: newSecret(e.t), Ordering: webhookd.OrderingFIFO}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	if ep.Ordering != webhookd.OrderingFIFO {
		e.t.Fatalf("endpoint ordering %q, want fifo", ep.Ordering)
	}
	return ep
}

// TestFIFOInOrderOneAtATime: two workers share an ordered endpoint whose
// receiver fails the first try of every seventh event; every event gets
// through, one request at a time, strictly in the order the events were
// accepted, while an ordinary endpoint of the same events gets them all.
func TestFIFOInOrderOneAtATime(t *testing.T) {
	t.Parallel()
	const events = 300
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}
	})
	e.startWorker()
	ordered := newOrderedReceiver(t, func(n, try int) bool { return n%7 == 3 && try == 1 })
	e.orderedEndpoint(ordered.URL)
	var plainGot atomic.Int32
	plain := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { plainGot.Add(1) })
	e.endpoint(plain.URL, nil)

	e.publishNumbered("t.fifo", 0, events/2, 1)       // one event per acceptance
	e.publishNumbered("t.fifo", events/2, events, 25) // and batches
	waitFor(t, 60*time.Second, "the ordinary endpoint's deliveries", func() bool { return plainGot.Load() >= events })
	waitFor(t, 120*time.Second, "every delivery to the ordered endpoint", func() bool { return ordered.delivered() == events })
	ordered.checkOrder(t, events)
	waitFor(t, 10*time.Second, "every delivery recorded as succeeded", func() bool {
		return e.count(`SELECT count(*) FROM deliveries WHERE status <> 'succeeded'`) == 0
	})
}

// TestFIFODeadLetterLetsTheNextGo: a delivery that runs out of attempts
// holds the ones behind it until it is a dead letter, then they go, in
// order; redelivering the dead letter by hand later does not disturb them.
func TestFIFODeadLetterLetsTheNextGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *dispatcher.Config) {
		c.Schedule = dispatcher.Schedule{100 * time.Millisecond, 100 * time.Millisecond}
	})
	ordered := newOrderedReceiver(t, func(n, try int) bool { return n == 2 && try <= 3 })
	ep := e.orderedEndpoint(ordered.URL)
	e.publishNumbered("t.fifo", 0, 10, 1)
	waitFor(t, 30*time.Second, "the rest after the dead letter", func() bool { return ordered.delivered() == 9 })
	ordered.mu.Lock()
	seq := append([]int(nil), ordered.seq...)
	ordered.mu.Unlock()
	want := []int{0, 1, 2, 2, 2, 3, 4, 5, 6, 7, 8, 9}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("requests by event %v, want %v", seq, want)
	}
	var dl string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT delivery_id FROM dead_letters WHERE endpoint_id = $1`, ep.ID).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	// By hand, the dead letter is sent at once, out of the queue's order
	// (the queue has moved on), and the queue is left as it was.
	e.redeliver(dl, "ops")
	e.waitStatus(dl, webhookd.DeliverySucceeded, 20*time.Second)
	ordered.mu.Lock()
	defer ordered.mu.Unlock()
	if got := fmt.Sprint(ordered.seq); got != fmt.Sprint(append(want, 2)) {
		t.Errorf("requests by event %v after the redelivery, want %v", got, append(want, 2))
	}
}
