package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// faultKinds are every kind of fault the soak injects; the schedule
// starts with each once, in a seeded order, then draws at random.
var faultKinds = []string{"kill-9", "sigterm", "postgres-restart", "redis-restart", "redis-lost",
	"latency", "reset_peer", "timeout", "blackhole", "bandwidth", "storm"}

// toxicKinds are the faults that are one toxic on one proxy.
var toxicKinds = []string{"latency", "reset_peer", "timeout", "blackhole", "bandwidth"}

// plannedFault is one entry of the schedule.
type plannedFault struct {
	At      time.Duration // after the load starts
	Kind    string
	Targets []string      // process slots or proxies
	Hold    time.Duration // how long the fault lasts (a process or server stays down)
	Param   int           // latency ms, reset/timeout ms, bandwidth KB/s
}

func (f plannedFault) String() string {
	s := fmt.Sprintf("%6.1fs %-16s %-40s hold %4.1fs", f.At.Seconds(), f.Kind, strings.Join(f.Targets, ","), f.Hold.Seconds())
	if f.Param > 0 {
		s += fmt.Sprintf(" param %d", f.Param)
	}
	return s
}

// planFaults draws the schedule from seed: one fault every gap on average
// (so several overlap), from warm-up until duration, of kinds (a drill's
// few) or, when kinds is empty, of every kind and the heartbeat stall.
func planFaults(seed uint64, duration, gap time.Duration, kinds, procs, proxies []string) []plannedFault {
	rng := rand.New(rand.NewPCG(seed, 7))
	if len(kinds) == 0 {
		kinds = append(slices.Clone(faultKinds), "heartbeat-stall")
	}
	stall := slices.Contains(kinds, "heartbeat-stall")
	kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "heartbeat-stall" })
	order := slices.Clone(kinds)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var plan []plannedFault
	warmup := min(5*time.Second, duration/10)
	for at := warmup; len(kinds) > 0 && at < duration-3*time.Second; at += gap/2 + time.Duration(rng.Int64N(int64(gap))) {
		kind := ""
		if len(plan) < len(order) {
			kind = order[len(plan)]
		} else {
			kind = kinds[rng.IntN(len(kinds))]
		}
		f := plannedFault{At: at, Kind: kind, Hold: time.Second + time.Duration(rng.Int64N(int64(9*time.Second)))}
		f.Hold = min(f.Hold, duration-at)
		switch kind {
		case "kill-9", "sigterm":
			f.Targets = []string{procs[rng.IntN(len(procs))]}
			f.Hold = min(f.Hold, 5*time.Second)
		case "postgres-restart", "redis-restart", "redis-lost":
			f.Hold = min(f.Hold, 6*time.Second)
		case "storm":
			n := 2 + rng.IntN(3)
			for _, i := range rng.Perm(len(proxies))[:n] {
				f.Targets = append(f.Targets, proxies[i])
			}
		default:
			f.Targets = []string{proxies[rng.IntN(len(proxies))]}
		}
		switch kind {
		case "latency", "storm":
			f.Param = 200 + rng.IntN(1801)
		case "reset_peer", "timeout":
			f.Param = rng.IntN(2000)
		case "bandwidth":
			f.Param = 1 + rng.IntN(16)
		}
		plan = append(plan, f)
	}
	if !stall {
		return plan
	}
	return insertStall(plan, seed, duration, proxies)
}

// insertStall adds the heartbeat stall to plan: seconds of latency on one
// worker's PostgreSQL link, from a third of the soak on, for longer than a
// heartbeat may be late (storage.WorkerStale, 5 s), so that worker is found
// dead while it still runs and its records must be refused. It draws from
// a generator of its own: the rest of a seed's plan stays as it was.
func insertStall(plan []plannedFault, seed uint64, duration time.Duration, proxies []string) []plannedFault {
	var links []string
	for _, p := range proxies {
		if strings.HasPrefix(p, "worker-") && strings.HasSuffix(p, "/postgres") {
			links = append(links, p)
		}
	}
	if len(links) == 0 {
		return plan
	}
	rng := rand.New(rand.NewPCG(seed, 8))
	f := plannedFault{Kind: "heartbeat-stall", Targets: []string{links[rng.IntN(len(links))]},
		At:    duration/3 + time.Duration(rng.Int64N(int64(duration/6))),
		Hold:  10*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))),
		Param: 6000 + rng.IntN(2001)}
	f.Hold = min(f.Hold, duration-f.At)
	i := sort.Search(len(plan), func(i int) bool { return plan[i].At > f.At })
	return slices.Insert(plan, i, f)
}

// faultRecord is a fault as it happened.
type faultRecord struct {
	plannedFault
	Start, End time.Time // injected; fully undone (a process ready again)
	Err        error
}

// faultRunner injects the plan into the system, one goroutine a fault,
// and serialises faults on the same process, server or proxy.
type faultRunner struct {
	sys   *chaosSystem
	rng   *rand.Rand
	locks sync.Map // resource name -> *sync.Mutex

	mu      sync.Mutex
	records []faultRecord
}

// Run injects every fault of the plan at its time after start and
// returns once all are undone.
func (r *faultRunner) Run(ctx context.Context, start time.Time, plan []plannedFault) {
	var wg sync.WaitGroup
	for _, f := range plan {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(f.At))):
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := r.inject(ctx, f)
			progress("chaos: %s -> %s-%s%s", f, rec.Start.UTC().Format("15:04:05.0"), rec.End.UTC().Format("15:04:05.0"),
				errSuffix(rec.Err))
			r.mu.Lock()
			r.records = append(r.records, rec)
			r.mu.Unlock()
		}()
	}
	wg.Wait()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (error: " + err.Error() + ")"
}

// Records is every fault injected, by start time.
func (r *faultRunner) Records() []faultRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.records)
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// lock takes the locks of names, in order, and returns their release.
func (r *faultRunner) lock(names ...string) func() {
	names = slices.Clone(names)
	slices.Sort(names)
	var held []*sync.Mutex
	for _, n := range names {
		m, _ := r.locks.LoadOrStore(n, &sync.Mutex{})
		m.(*sync.Mutex).Lock()
		held = append(held, m.(*sync.Mutex))
	}
	return func() {
		for _, m := range held {
			m.Unlock()
		}
	}
}

// inject performs one fault and undoes it after its hold.
func (r *faultRunner) inject(ctx context.Context, f plannedFault) (rec faultRecord) {
	rec.plannedFault = f
	hold := func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.Hold):
		}
	}
	// Undoing uses a context of its own: the soak's may have ended, and a
	// server left down would fail the drain.
	undo := context.WithoutCancel(ctx)
	switch f.Kind {
	case "kill-9", "sigterm":
		defer r.lock("proc:" + f.Targets[0])()
		p := r.sys.proc(f.Targets[0])
		rec.Start = time.Now()
		if f.Kind == "kill-9" {
			p.Kill()
		} else {
			p.Stop(30 * time.Second)
		}
		hold()
		rec.Err = p.Start(undo)
	case "postgres-restart":
		defer r.lock("postgres")()
		rec.Start = time.Now()
		mode := "fast"
		if f.Hold%2 == 0 {
			mode = "immediate"
		}
		rec.Kind += "/" + mode
		if rec.Err = r.sys.pg.Stop(undo, mode); rec.Err == nil {
			hold()
			rec.Err = r.sys.pg.Start(undo)
		}
	case "redis-restart", "redis-lost":
		defer r.lock("redis")()
		rs := r.sys.redis
		rec.Start = time.Now()
		if f.Kind == "redis-restart" {
			rec.Err = rs.Client.Save(ctx).Err() // what a restart keeps
		}
		rs.Stop()
		if f.Kind == "redis-lost" {
			os.Remove(filepath.Join(rs.dir, "dump.rdb"))
		}
		hold()
		if err := rs.Restart(undo); err != nil {
			rec.Err = err
		}
	default:
		defer r.lock(prefixAll("proxy:", f.Targets)...)()
		rec.Start = time.Now()
		var added []string
		for _, name := range f.Targets {
			kind := f.Kind
			if kind == "storm" {
				kind = toxicKinds[int(hash(name+f.At.String()))%len(toxicKinds)]
			}
			t := toxicFor(kind, f.Param)
			if err := r.sys.px.AddToxic(name, t); err != nil {
				rec.Err = err
				continue
			}
			added = append(added, name+"="+kind)
			defer r.sys.px.RemoveToxic(name, t.Name)
		}
		if f.Kind == "storm" {
			rec.Targets = added
		}
		hold()
	}
	rec.End = time.Now()
	return rec
}

// toxicFor is the toxic of a fault kind with its parameter.
func toxicFor(kind string, param int) toxic {
	t := toxic{Name: "chaos-" + kind, Type: kind, Stream: "downstream", Toxicity: 1, Attributes: map[string]int{}}
	switch kind {
	case "latency":
		t.Attributes["latency"], t.Attributes["jitter"] = param, param/4
	case "heartbeat-stall": // latency, steady: every beat of the worker times out
		t.Type, t.Attributes["latency"] = "latency", param
	case "reset_peer", "timeout":
		t.Attributes["timeout"] = param
	case "blackhole": // a timeout toxic of 0 holds the data until it is removed
		t.Type, t.Attributes["timeout"] = "timeout", 0
	case "bandwidth":
		t.Attributes["rate"] = max(param, 1)
	}
	return t
}

func prefixAll(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// hash is FNV-1a, to pick a storm's toxic per proxy deterministically enough.
func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
