package redisbatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestMain fails the run if a batch goroutine outlives the tests: Wrap
// promises to leave none behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for leaked() != "" {
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "redisbatch: batch goroutine still running after the tests:\n%s\n", leaked())
				code = 1
				break
			}
			time.Sleep(10 * time.Millisecond) // poll for the goroutines to exit
		}
	}
	os.Exit(code)
}

// leaked returns the stacks of the goroutines running batches.
func leaked() string {
	buf := make([]byte, 1<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "redisbatch.(*Client).run") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// env is a test's own Redis database: rdb is a plain client on it, and w
// wraps a second client whose pipelines are counted.
type env struct {
	rdb    *redis.Client
	under  *redis.Client // the client w wraps
	w      *Client
	count  *pipelineCounter
	prefix string // unique to the test; begin every key with it
}

func setup(t testing.TB) env {
	t.Helper()
	rdb, url := testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	under := redis.NewClient(opt)
	t.Cleanup(func() { under.Close() })
	count := &pipelineCounter{}
	under.AddHook(count)
	// The database is the test's own and emptied when it ends; the prefix
	// keeps apart the keys and scripts of tests that might share one.
	prefix := t.Name() + ":" + rand.Text() + ":"
	return env{rdb: rdb, under: under, w: Wrap(under), count: count, prefix: prefix}
}

// scripts reports whether cmds is a batch of script calls, not one of the
// pipelines go-redis sends to set up a new connection.
func scripts(cmds []redis.Cmder) bool {
	return strings.HasPrefix(cmds[0].Name(), "eval")
}

// pipelineCounter is a go-redis hook that counts batches of script calls
// and the calls in them.
type pipelineCounter struct{ pipelines, cmds atomic.Int64 }

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if scripts(cmds) {
			h.pipelines.Add(1)
			h.cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// incrScript returns a script that increments KEYS[1] and returns the new
// value. Its source, and so its SHA1, is unique to the test: no other test
// puts it into Redis's script cache.
func incrScript(e env) *redis.Script {
	return redis.NewScript("-- " + e.prefix + "\nreturn redis.call('INCR', KEYS[1])")
}

// runAll runs fn(i) for i in [0, n) in n goroutines released together, and
// waits for them.
func runAll(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // poll
	}
}

// waitIdle waits until w runs no batch, so that nothing more will reach Redis.
func waitIdle(t *testing.T, w *Client) {
	t.Helper()
	waitFor(t, "the batches to end", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running == 0
	})
}

func TestConcurrentCallsShareAPipeline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	script, key := incrScript(e), e.prefix+"n"
	const n = 200
	got := make([]int64, n)
	errs := make([]error, n)
	runAll(n, func(i int) { got[i], errs[i] = script.Run(ctx, e.w, []string{key}).Int64() })

	seen := map[int64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if got[i] < 1 || got[i] > n || seen[got[i]] {
			t.Fatalf("call %d returned %d: want each of 1..%d once", i, got[i], n)
		}
		seen[got[i]] = true
	}
	if v, err := e.rdb.Get(ctx, key).Int64(); err != nil || v != n {
		t.Fatalf("final value %d, %v; want %d", v, err, n)
	}
	// Script.Run sends EVALSHA, and EVAL after a NOSCRIPT.
	pipes, cmds := e.count.pipelines.Load(), e.count.cmds.Load()
	t.Logf("%d calls in %d pipelines", cmds, pipes)
	if cmds < n || pipes >= cmds {
		t.Fatalf("%d calls in %d pipelines: want fewer pipelines than calls", cmds, pipes)
	}
}

func TestACallThatCannotGiveUpGoesAloneOnItsGoroutine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	script, key := incrScript(e), e.prefix+"n"
	// asynq polls for its next task on a context without Done: alone, such a
	// call is sent on its caller's goroutine (no batch goroutine woken),
	// NOSCRIPT and its EVAL fallback included.
	bg := context.Background()
	for want := int64(1); want <= 3; want++ {
		if v, err := script.Run(bg, e.w, []string{key}).Int64(); err != nil || v != want {
			t.Fatalf("call %d alone: %d, %v", want, v, err)
		}
	}
	if n := e.w.warm.Live(); n != 0 {
		t.Fatalf("%d batch goroutines started for calls alone; want none", n)
	}
	if p := e.count.pipelines.Load(); p != 4 { // EVALSHA (NOSCRIPT), EVAL, EVALSHA, EVALSHA
		t.Fatalf("%d pipelines for 3 calls alone; want 4", p)
	}

	// Among others, they batch: half of many calls cannot give up.
	const n = 200
	got := make([]int64, n)
	errs := make([]error, n)
	runAll(n, func(i int) {
		ctx := t.Context()
		if i%2 == 0 {
			ctx = bg
		}
		got[i], errs[i] = script.Run(ctx, e.w, []string{key}).Int64()
	})
	seen := map[int64]bool{}
	for i := range n {
		if errs[i] != nil || got[i] < 4 || got[i] > n+3 || seen[got[i]] {
			t.Fatalf("call %d: %d, %v; want each of 4..%d once", i, got[i], errs[i], n+3)
		}
		seen[got[i]] = true
	}
	pipes, cmds := e.count.pipelines.Load()-4, e.count.cmds.Load()-4
	t.Logf("%d calls in %d pipelines", cmds, pipes)
	if pipes >= cmds {
		t.Fatalf("%d calls in %d pipelines: want fewer pipelines than calls", cmds, pipes)
	}
	waitIdle(t, e.w)
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	// A script this test's alone, never loaded: Redis does not know it, as
	// after a restart. (Not SCRIPT FLUSH: the script cache is the server's,
	// and flushing it made the tests running beside this one, in every
	// package, send EVAL again where they count their round trips.)
	script, key := incrScript(e), e.prefix+"n"
	if err := script.EvalSha(ctx, e.w, []string{key}).Err(); !errors.Is(err, redis.ErrNoScript) {
		t.Fatalf("EvalSha of a script never loaded: %v; want redis.ErrNoScript", err)
	}
	const n = 50
	errs := make([]error, n)
	runAll(n, func(i int) { errs[i] = script.Run(ctx, e.w, []string{key}).Err() })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if v, err := e.rdb.Get(ctx, key).Int64(); err != nil || v != n {
		t.Fatalf("final value %d, %v; want %d", v, err, n)
	}
}

func TestScriptErrorStaysWithItsCaller(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	script, key, list := incrScript(e), e.prefix+"n", e.prefix+"list"
	if err := e.rdb.RPush(ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	want := script.Run(ctx, e.rdb, []string{list}).Err() // what the plain client says
	if !redis.HasErrorPrefix(want, "WRONGTYPE") {
		t.Fatalf("plain client: %v; want a WRONGTYPE error", want)
	}

	const n = 100
	errs := make([]error, n)
	runAll(n, func(i int) {
		k := key
		if i%10 == 0 {
			k = list
		}
		errs[i] = script.Run(ctx, e.w, []string{k}).Err()
	})
	for i, err := range errs {
		switch {
		case i%10 == 0 && (err == nil || err.Error() != want.Error()):
			t.Errorf("call %d on the list: %v; want %v", i, err, want)
		case i%10 != 0 && err != nil:
			t.Errorf("call %d: %v", i, err)
		}
	}
	if v, err := e.rdb.Get(ctx, key).Int64(); err != nil || v != n-n/10 {
		t.Fatalf("final value %d, %v; want %d", v, err, n-n/10)
	}
}

// gateHook holds each batch of script calls until release is closed, after
// telling entered.
type gateHook struct {
	entered chan struct{}
	release chan struct{}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if scripts(cmds) {
			h.entered <- struct{}{}
			<-h.release
		}
		return next(ctx, cmds)
	}
}

func TestCallerThatGivesUp(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	gate := &gateHook{entered: make(chan struct{}, 8), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(gate.release) })
	t.Cleanup(release)
	e.under.AddHook(gate)
	src, key := "return redis.call('INCR', KEYS[1])", e.prefix+"n"
	eval := func(ctx context.Context) (int64, error) { return e.w.Eval(ctx, src, []string{key}).Int64() }
	type result struct {
		v   int64
		err error
	}
	// goEval calls eval in a goroutine that then goes on reading the
	// command it got until the test ends, as a caller may.
	stopReading := make(chan struct{})
	var readers sync.WaitGroup
	t.Cleanup(readers.Wait)
	t.Cleanup(func() { close(stopReading) })
	goEval := func(ctx context.Context) <-chan result {
		ch := make(chan result, 1)
		readers.Go(func() {
			cmd := e.w.Eval(ctx, src, []string{key})
			v, err := cmd.Int64()
			ch <- result{v, err}
			for {
				select {
				case <-stopReading:
					return
				default:
					_, _ = cmd.Result()
					runtime.Gosched()
				}
			}
		})
		return ch
	}
	recv := func(ch <-chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(5 * time.Second):
			t.Fatal("no answer after 5 s")
			return result{}
		}
	}
	entered := func() {
		t.Helper()
		select {
		case <-gate.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("no pipeline after 5 s")
		}
	}
	pending := func() int {
		e.w.mu.Lock()
		defer e.w.mu.Unlock()
		return len(e.w.pending)
	}

	// A caller whose context has already ended sends nothing.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := eval(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v; want context.Canceled", err)
	}

	// Hold two pipelines in flight, the first with a caller that will give
	// up, and queue a caller that gives up and one that waits. Those that
	// give up answer at once; the batch then still writes into the command
	// of the one in flight (-race checks that it is not the one returned).
	inFlight, quitInFlight := context.WithCancel(ctx)
	a := goEval(inFlight)
	entered()
	b := goEval(ctx)
	entered()
	queued, quitQueued := context.WithCancel(ctx)
	c := goEval(queued)
	d := goEval(ctx)
	waitFor(t, "two pending calls", func() bool { return pending() == 2 })
	quitInFlight()
	quitQueued()
	for _, ch := range []<-chan result{a, c} {
		if r := recv(ch); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("caller that gave up: %d, %v; want context.Canceled", r.v, r.err)
		}
	}

	release()
	vb, vd := recv(b), recv(d)
	if vb.err != nil || vd.err != nil || vb.v == vd.v {
		t.Fatalf("callers that waited: %d, %v and %d, %v", vb.v, vb.err, vd.v, vd.err)
	}
	waitIdle(t, e.w)
	// The script of the caller that gave up in flight ran, the one queued did not.
	if v, err := e.rdb.Get(ctx, key).Int64(); err != nil || v != 3 {
		t.Fatalf("final value %d, %v; want 3", v, err)
	}
}

func TestShortDeadlinesAmongOthers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	script, key := incrScript(e), e.prefix+"n"
	if err := script.Load(ctx, e.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 200
	vals := make([]int64, n)
	errs := make([]error, n)
	runAll(n, func(i int) {
		ctx := ctx
		if i%2 == 1 { // deadlines of 5 µs to 1 ms
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(5*i)*time.Microsecond)
			defer cancel()
		}
		vals[i], errs[i] = script.Run(ctx, e.w, []string{key}).Int64()
	})
	ok, seen := 0, map[int64]bool{}
	for i := range n {
		switch {
		case errs[i] == nil && seen[vals[i]]:
			t.Errorf("call %d returned %d twice", i, vals[i])
		case errs[i] == nil:
			ok++
			seen[vals[i]] = true
		case i%2 == 0 || !errors.Is(errs[i], context.DeadlineExceeded):
			t.Errorf("call %d: %v", i, errs[i])
		}
	}
	waitIdle(t, e.w)
	// A caller may give up while its script runs: the count is at least the
	// successes and at most all calls.
	if v, err := e.rdb.Get(ctx, key).Int64(); err != nil || v < int64(ok) || v > n {
		t.Fatalf("final value %d, %v; want %d..%d", v, err, ok, n)
	}
	t.Logf("%d of %d calls succeeded", ok, n)
}

func TestRateLimiter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	lim := redis_rate.NewLimiter(e.w)
	const n, burst = 20, 10
	var allowed atomic.Int64
	runAll(n, func(i int) {
		res, err := lim.Allow(ctx, e.prefix+"project", redis_rate.PerMinute(burst))
		if err != nil {
			t.Errorf("allow: %v", err)
			return
		}
		allowed.Add(int64(res.Allowed))
	})
	if got := allowed.Load(); got != burst {
		t.Fatalf("%d of %d requests allowed; want %d", got, n, burst)
	}
}

func TestAsynqEnqueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := "redisbatch_" + strings.ToLower(rand.Text())
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	t.Cleanup(func() {
		if err := insp.DeleteQueue(q, true); err != nil {
			t.Errorf("delete queue: %v", err)
		}
	})
	client := asynq.NewClientFromRedisClient(e.w)
	ctx := t.Context()
	const n = 100
	runAll(n, func(i int) {
		task := asynq.NewTask("redisbatch:test", []byte(fmt.Sprint(i)))
		if _, err := client.EnqueueContext(ctx, task, asynq.Queue(q), asynq.TaskID(fmt.Sprintf("t%d", i))); err != nil {
			t.Errorf("enqueue %d: %v", i, err)
		}
	})
	info, err := insp.GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pending != n {
		t.Fatalf("%d pending tasks; want %d", info.Pending, n)
	}
	_, err = client.EnqueueContext(ctx, asynq.NewTask("redisbatch:test", nil), asynq.Queue(q), asynq.TaskID("t7"))
	if !errors.Is(err, asynq.ErrTaskIDConflict) {
		t.Fatalf("enqueue of an existing task ID: %v; want asynq.ErrTaskIDConflict", err)
	}
}

// BenchmarkEvalSha compares a plain client with a wrapped one, one caller at
// a time (latency) and with many callers at once (throughput).
func BenchmarkEvalSha(b *testing.B) {
	e := setup(b)
	ctx := b.Context()
	script, key := incrScript(e), e.prefix+"n"
	if err := script.Load(ctx, e.rdb).Err(); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, c redis.Scripter) {
		if err := script.EvalSha(ctx, c, []string{key}).Err(); err != nil {
			b.Error(err) // not Fatal: it runs in RunParallel's goroutines too
		}
	}
	for _, bc := range []struct {
		name string
		c    redis.Scripter
	}{{"plain", e.rdb}, {"wrapped", e.w}} {
		b.Run(bc.name+"/serial", func(b *testing.B) {
			for b.Loop() {
				run(b, bc.c)
			}
		})
		for _, p := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/parallel%d", bc.name, p), func(b *testing.B) {
				pipes, cmds := e.count.pipelines.Load(), e.count.cmds.Load()
				b.SetParallelism(p)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						run(b, bc.c)
					}
				})
				if n := e.count.pipelines.Load() - pipes; n > 0 {
					b.ReportMetric(float64(e.count.cmds.Load()-cmds)/float64(n), "calls/pipeline")
				}
			})
		}
	}
}
