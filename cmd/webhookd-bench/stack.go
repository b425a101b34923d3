package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// stack is the world of one scenario run: a fresh database, a throwaway
// Redis, the receiver, a project key, and (once started) `webhookd all`.
// Close takes it all down again, in an order that lets nothing hang.
type stack struct {
	opts   *Options
	dir    string
	db     *benchDatabase
	redis  *redisServer
	recv   *receiver
	key    string
	proc   *webhookdProcess   // webhookd all, or serve beside workers
	extra  []*webhookdProcess // webhookd worker processes beside serve (startSplit)
	api    *apiClient
	client *http.Client // for /readyz and /metrics

	toolCPU time.Duration // the tool's CPU time when webhookd was ready
	pgPID   int           // the local PostgreSQL server's postmaster; 0: not local
	pgCPU   time.Duration // its CPU time when webhookd was ready
	walLSN  string        // the server's WAL position when webhookd was ready; "": not known
}

// startStack prepares a stack and starts webhookd on it with the extra
// environment; on failure nothing is left behind.
func startStack(ctx context.Context, opts *Options, seq int, extra ...string) (*stack, error) {
	s, err := prepareStack(ctx, opts, seq)
	if err != nil {
		return nil, err
	}
	if err := s.start(ctx, extra...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// prepareStack makes the database (webhookd_bench_<pid>_<seq>), starts
// Redis and the receiver, migrates, and creates the project "bench".
// webhookd itself is not started yet: see start.
func prepareStack(ctx context.Context, opts *Options, seq int) (_ *stack, err error) {
	s := &stack{opts: opts, client: newLoopbackClient(10 * time.Second)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "webhookd-bench-*"); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("webhookd_bench_%d_%d", os.Getpid(), seq)
	if opts.HistoryDatabase != "" {
		s.db, err = existingDatabase(opts.DatabaseURL, opts.HistoryDatabase)
	} else {
		s.db, err = createDatabase(ctx, opts.DatabaseURL, name)
	}
	if err != nil {
		return nil, err
	}
	if s.redis, err = startRedis(ctx, s.dir); err != nil {
		return nil, err
	}
	if s.recv, err = startReceiver(); err != nil {
		return nil, err
	}
	if _, err = runCommand(ctx, opts.Webhookd, s.env(), "migrate"); err != nil {
		return nil, err
	}
	if opts.HistoryDatabase != "" {
		if err = retireBenchProject(ctx, s.db.URL); err != nil {
			return nil, err
		}
	}
	out, err := runCommand(ctx, opts.Webhookd, s.env(), "keys", "create", "--project", "bench", "--rate-limit", "100000000")
	if err != nil {
		return nil, err
	}
	s.key = strings.TrimSpace(out)
	return s, nil
}

// env is the environment of every webhookd command of the run: the
// caller's, minus its WEBHOOKD_* settings, plus the run's and extra.
func (s *stack) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEBHOOKD_") {
			env = append(env, kv)
		}
	}
	env = append(env, s.opts.Env...) // before the run's own, which win
	env = append(env, "WEBHOOKD_DATABASE_URL="+s.db.URL, "WEBHOOKD_REDIS_URL="+s.redis.URL,
		"WEBHOOKD_ALLOW_PRIVATE_NETWORKS=true", "WEBHOOKD_LOG_LEVEL=warn")
	if s.opts.WorkerConcurrency > 0 {
		env = append(env, fmt.Sprintf("WEBHOOKD_WORKER_CONCURRENCY=%d", s.opts.WorkerConcurrency))
	}
	return append(env, extra...)
}

// start runs `webhookd all` with extra environment on free loopback ports
// and waits until /readyz answers 200.
func (s *stack) start(ctx context.Context, extra ...string) error {
	apiAddr, err := freeAddr()
	if err != nil {
		return err
	}
	dashAddr, err := freeAddr()
	if err != nil {
		return err
	}
	env := s.env(append([]string{"WEBHOOKD_API_ADDR=" + apiAddr, "WEBHOOKD_DASHBOARD_ADDR=" + dashAddr}, extra...)...)
	s.proc, err = startWebhookd(s.opts.Webhookd, "all", env, apiAddr, dashAddr, filepath.Join(s.dir, "webhookd.log"))
	if err != nil {
		return err
	}
	if err := s.proc.WaitReady(ctx, s.client); err != nil {
		return err
	}
	s.api = newAPIClient(s.proc.APIURL, s.key)
	s.markCPU(ctx)
	return nil
}

// startSplitStack is startStack with webhookd as separate processes:
// `webhookd serve` (the API and dashboard) and workers `webhookd worker`
// processes (each with its ops listener), so that a worker can be killed
// while the API goes on.
func startSplitStack(ctx context.Context, opts *Options, seq, workers int, extra ...string) (*stack, error) {
	s, err := prepareStack(ctx, opts, seq)
	if err != nil {
		return nil, err
	}
	if err := s.startSplit(ctx, workers, extra...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startSplit runs `webhookd serve` and workers `webhookd worker` processes
// with extra environment and waits until each /readyz answers 200.
func (s *stack) startSplit(ctx context.Context, workers int, extra ...string) error {
	apiAddr, err := freeAddr()
	if err != nil {
		return err
	}
	dashAddr, err := freeAddr()
	if err != nil {
		return err
	}
	env := s.env(append([]string{"WEBHOOKD_API_ADDR=" + apiAddr, "WEBHOOKD_DASHBOARD_ADDR=" + dashAddr}, extra...)...)
	s.proc, err = startWebhookd(s.opts.Webhookd, "serve", env, apiAddr, dashAddr, filepath.Join(s.dir, "webhookd-serve.log"))
	if err != nil {
		return err
	}
	for range workers {
		if _, err := s.startWorker(extra...); err != nil {
			return err
		}
	}
	for _, p := range s.processes() {
		if err := p.WaitReady(ctx, s.client); err != nil {
			return err
		}
	}
	s.api = newAPIClient(s.proc.APIURL, s.key)
	s.markCPU(ctx)
	return nil
}

// startWorker starts one more `webhookd worker` beside serve, with extra
// environment and its ops listener on a free loopback port; it does not
// wait for the worker's /readyz.
func (s *stack) startWorker(extra ...string) (*webhookdProcess, error) {
	opsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := s.env(append([]string{"WEBHOOKD_DASHBOARD_ADDR=" + opsAddr}, extra...)...)
	w, err := startWebhookd(s.opts.Webhookd, "worker", env, "", opsAddr,
		filepath.Join(s.dir, fmt.Sprintf("webhookd-worker-%d.log", len(s.extra))))
	if err != nil {
		return nil, err
	}
	s.extra = append(s.extra, w)
	return w, nil
}

// markCPU notes the tool's and PostgreSQL's CPU time as webhookd is
// ready: usage counts from there.
func (s *stack) markCPU(ctx context.Context) {
	s.toolCPU = ownCPUTime()
	s.walLSN = walPosition(ctx, s.db.URL)
	if s.pgPID = postmasterPID(ctx, s.db.URL); s.pgPID != 0 {
		var err error
		if s.pgCPU, err = serverCPUTime(s.pgPID); err != nil {
			s.pgPID = 0
		}
	}
}

// processes are the webhookd processes started and not killed on purpose.
func (s *stack) processes() []*webhookdProcess {
	var out []*webhookdProcess
	for _, p := range append([]*webhookdProcess{s.proc}, s.extra...) {
		if p != nil && !p.killed {
			out = append(out, p)
		}
	}
	return out
}

// endpoint is one receiver endpoint a scenario creates.
type endpoint struct {
	name        string
	behaviour   behaviour
	eventType   string
	maxInFlight int    // 0: not sent
	ordering    string // "": not sent
}

// benchTransformation is the script -transform gives every endpoint: a
// partner's renamed fields and a header, the path kept (the receiver knows
// its endpoints by their paths).
const benchTransformation = `function handler(w) {
	w.payload = {kind: w.payload.type, ref: w.payload.id, body: w.payload.data};
	w.headers["x-partner"] = "bench";
	return w;
}`

// createEndpoints adds each endpoint to the receiver and creates it through
// the API. It returns a note when max_in_flight had to be left out.
func (s *stack) createEndpoints(ctx context.Context, eps []endpoint) (string, error) {
	note := ""
	for _, e := range eps {
		url := s.recv.Add(e.name, e.behaviour)
		in := endpointIn{URL: url, EventTypes: []string{e.eventType}, MaxInFlight: e.maxInFlight, Ordering: e.ordering}
		if s.opts.Transform {
			in.Transformation = benchTransformation
		}
		_, supported, err := s.api.CreateEndpoint(ctx, in)
		if err != nil {
			return "", err
		}
		if !supported && e.ordering != "" {
			note = "ordering is not supported by this binary (400 on that field): the endpoint was created without it."
		} else if !supported {
			note = fmt.Sprintf("max_in_flight is not supported yet (400 on that field): endpoints were created "+
				"without it, so webhookd's default per-endpoint cap applied instead of %d.", e.maxInFlight)
		}
	}
	return note, nil
}

// common is the figures every scenario reports: events lost, duplicates,
// API requests refused (wanted as refusals says), and webhookd's peak RSS.
// It fails if a webhookd process has exited (one killed on purpose aside).
func (s *stack) common(st deliveryStats, refusals target) ([]figure, error) {
	for _, p := range s.processes() {
		if err := p.Exited(); err != nil {
			return nil, err
		}
	}
	usage, err := s.usage()
	if err != nil {
		return nil, err
	}
	return append([]figure{
		{Name: "events lost", Unit: count, Value: float64(st.Lost), Target: none()},
		{Name: "duplicate receipts", Unit: count, Value: float64(s.recv.Repeats()), Target: info},
		{Name: "API requests refused", Unit: count, Value: float64(s.api.refused.Load()), Target: refusals},
	}, usage...), nil
}

// usage is webhookd's peak resident set and the CPU time webhookd, the
// tool and (when it runs here) PostgreSQL have used since webhookd started:
// they share the CPUs, and this says how much each took. With several
// webhookd processes, the peak is the largest process's and the CPU time
// their sum (a killed one's is gone).
func (s *stack) usage() ([]figure, error) {
	rss, err := s.peakRSS()
	if err != nil {
		return nil, err
	}
	var cpu time.Duration
	for _, p := range s.processes() {
		c, err := p.CPUTime()
		if err != nil {
			return nil, err
		}
		cpu += c
	}
	figs := []figure{rss,
		{Name: "webhookd CPU time", Unit: seconds, Value: cpu.Seconds(), Target: info},
		{Name: "load tool CPU time", Unit: seconds, Value: (ownCPUTime() - s.toolCPU).Seconds(), Target: info},
	}
	if pg, ok := s.postgresCPU(); ok {
		figs = append(figs, figure{Name: "PostgreSQL CPU time (whole server)", Unit: seconds, Value: pg.Seconds(), Target: info})
	}
	if s.walLSN != "" {
		if n, err := walSince(s.db.URL, s.walLSN); err == nil {
			figs = append(figs, figure{Name: "PostgreSQL WAL written (whole server)", Unit: megabytes, Value: n, Target: info})
		}
	}
	return figs, nil
}

// postgresCPU is the CPU time the PostgreSQL server has used since
// webhookd was ready: false when the server does not run here or was
// restarted meanwhile.
func (s *stack) postgresCPU() (time.Duration, bool) {
	if s.pgPID == 0 {
		return 0, false
	}
	pg, err := serverCPUTime(s.pgPID)
	return pg - s.pgCPU, err == nil
}

// peakRSS is webhookd's peak resident set (VmHWM) so far: the largest of
// its processes' (a killed one's aside).
func (s *stack) peakRSS() (figure, error) {
	var rss int64
	for _, p := range s.processes() {
		r, err := p.PeakRSS()
		if err != nil {
			return figure{}, err
		}
		rss = max(rss, r)
	}
	return figure{Name: "webhookd peak RSS", Unit: megabytes, Value: float64(rss), Target: below(200e6, megabytes)}, nil
}

// Close releases the receiver's held requests, stops webhookd and Redis,
// drops the database and removes the run's directory.
func (s *stack) Close() {
	if s.recv != nil {
		s.recv.Close()
	}
	for _, p := range s.extra {
		p.Stop(15 * time.Second)
	}
	if s.proc != nil {
		s.proc.Stop(15 * time.Second)
	}
	if s.redis != nil {
		s.redis.Stop()
	}
	if s.db != nil {
		if err := s.db.Drop(); err != nil {
			fmt.Fprintln(os.Stderr, "webhookd-bench: warning:", err)
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
