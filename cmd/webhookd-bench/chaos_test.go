package main

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The schedule is a function of the seed alone (so a printed seed repeats
// a run), and a soak long enough for it injects every kind of fault.
func TestPlanFaultsRepeatsAndCoversEveryKind(t *testing.T) {
	procs := []string{"serve-1", "serve-2", "worker-1", "worker-2"}
	proxies := []string{"serve-1/postgres", "serve-1/redis", "worker-1/postgres", "worker-1/redis"}
	a := planFaults(42, 3*time.Minute, 6*time.Second, nil, procs, proxies)
	b := planFaults(42, 3*time.Minute, 6*time.Second, nil, procs, proxies)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	if c := planFaults(43, 3*time.Minute, 6*time.Second, nil, procs, proxies); reflect.DeepEqual(a, c) {
		t.Fatal("two seeds gave one plan")
	}
	stalls := 0
	for _, f := range a {
		if f.Kind == "heartbeat-stall" {
			stalls++
			if !slices.Contains([]string{"worker-1/postgres"}, f.Targets[0]) || f.Param < 6000 || f.Hold < 10*time.Second {
				t.Errorf("%s: not a stall of a worker's PostgreSQL link", f)
			}
		}
	}
	if stalls != 1 {
		t.Errorf("%d heartbeat stalls in a plan, want 1", stalls)
	}
	for _, kind := range faultKinds {
		if !slices.ContainsFunc(a, func(f plannedFault) bool { return f.Kind == kind }) {
			t.Errorf("no %s in a 3-minute plan", kind)
		}
	}
	drill := planFaults(42, 3*time.Minute, 6*time.Second, []string{"redis-restart", "kill-9"}, procs, proxies)
	if len(drill) < 20 {
		t.Errorf("a drill of two kinds planned %d faults in 3 minutes, want one every 6 s", len(drill))
	}
	for _, f := range drill {
		if f.Kind != "redis-restart" && f.Kind != "kill-9" {
			t.Errorf("%s in a drill of redis-restart and kill-9", f)
		}
	}
	if stall := planFaults(42, time.Minute, 6*time.Second, []string{"heartbeat-stall"}, procs, proxies); len(stall) != 1 {
		t.Errorf("a drill of the heartbeat stall planned %v", stall)
	}
	for _, f := range a {
		if f.At < 0 || f.At+f.Hold > 3*time.Minute || f.Hold <= 0 {
			t.Errorf("%s: outside the soak", f)
		}
		if f.Kind == "storm" && len(f.Targets) < 2 {
			t.Errorf("%s: a storm of fewer than two proxies", f)
		}
	}
}

func TestDuringFault(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	w := []faultRecord{{Start: t0, End: t0.Add(5 * time.Second)}}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{-4 * time.Second, false}, {-2 * time.Second, true}, {3 * time.Second, true}, {14 * time.Second, true}, {16 * time.Second, false}} {
		if got := duringFault(t0.Add(c.at), w, 10*time.Second); got != c.want {
			t.Errorf("at %s: %v, want %v", c.at, got, c.want)
		}
	}
}

// A blackhole is toxiproxy's timeout toxic with no timeout: the data is
// held until the toxic goes.
func TestToxicFor(t *testing.T) {
	if b := toxicFor("blackhole", 500); b.Type != "timeout" || b.Attributes["timeout"] != 0 {
		t.Errorf("blackhole: %+v", b)
	}
	if l := toxicFor("latency", 800); l.Attributes["latency"] != 800 || l.Attributes["jitter"] != 200 {
		t.Errorf("latency: %+v", l)
	}
}

func TestRoutes(t *testing.T) {
	if got := routes("audit.logged"); !slices.Equal(got, []string{"instant", "slow", "ratelimited", "hanging"}) {
		t.Errorf("audit.logged goes to %v", got)
	}
	if got := routes("order.created"); !slices.Equal(got, []string{"instant", "slow", "flapping", "gone"}) {
		t.Errorf("order.created goes to %v", got)
	}
	if got := routes("account.updated"); !slices.Equal(got, []string{"instant", "slow", "ordered"}) {
		t.Errorf("account.updated goes to %v", got)
	}
}

// covered counts the time under faults once, however they overlap: the
// liveness and probe checks count only the rest.
func TestCovered(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := [][2]time.Time{{at(2), at(5)}, {at(4), at(8)}, {at(10), at(11)}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{{0, 1, 0}, {0, 20, 7 * time.Second}, {3, 9, 5 * time.Second}, {6, 10, 2 * time.Second}, {9, 10, 0}, {10, 11, time.Second}} {
		if got := covered(w, at(c.from), at(c.to)); got != c.want {
			t.Errorf("covered(%d..%d) = %s, want %s", c.from, c.to, got, c.want)
		}
	}
}

// The outbox and bulk senders keep off the endpoints whose shares are
// sized for the posted events alone.
func TestPickRoomyType(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for range 1000 {
		seen[pickRoomyType(rng)]++
	}
	if len(seen) != 2 || seen["order.created"] < 550 || seen["order.paid"] < 200 {
		t.Errorf("types drawn: %v", seen)
	}
}

// Growth past the warm-up of a long-lived process is a leak; a window too
// short to tell one from what a fault left behind is not judged.
func TestRSSFlatJudgedOnlyOverALongWindow(t *testing.T) {
	at := time.Unix(0, 0)
	proc := func(samples int, mb func(i int) int64) *chaosProc {
		p := &chaosProc{Name: "worker-2", incarnation: 2}
		for i := range samples { // a sample every 2 s
			p.rss = append(p.rss, rssSample{at: at.Add(time.Duration(i) * 2 * time.Second), incarnation: 2, bytes: mb(i) << 20})
		}
		return p
	}
	leak := func(i int) int64 { return 40 + int64(i) } // 1 MB more every 2 s, to the end
	if l := rssOf(proc(180, leak)); l.Flat || !l.Judged {
		t.Errorf("6 min of steady growth judged flat: %+v", l)
	}
	if l := rssOf(proc(180, func(i int) int64 { return min(40+int64(i), 70) })); !l.Flat || !l.Judged {
		t.Errorf("growth that stops in the warm-up judged a leak: %+v", l)
	}
	if l := rssOf(proc(28, func(i int) int64 { return 44 + int64(max(i-15, 0))*3 })); !l.Flat || l.Judged {
		t.Errorf("56 s judged: %+v", l)
	}
}
