package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// chaosSystem is what the soak runs and breaks: a throwaway PostgreSQL
// server (webhookd's database and a service's, whose outbox the workers
// move) and redis-server, 2 `webhookd serve` and 2 `webhookd worker`
// processes, each reaching PostgreSQL and Redis through a toxiproxy proxy
// of its own, and the receiver.
type chaosSystem struct {
	opts     *chaosOptions
	dir      string
	pg       *chaosPostgres
	db       *benchDatabase
	outboxDB *benchDatabase // the service's database (chaos_outbox.go)
	redis    *redisServer
	px       *faultProxies
	recv     *chaosReceiver
	key      string
	procs    []*chaosProc // serve-1, serve-2, worker-1, worker-2
	http     *http.Client

	endpointNames map[string]string // endpoint id -> receiver endpoint name
	endpointIDs   map[string]string // receiver endpoint name -> endpoint id
	keep          bool              // keep dir (the logs) at Close
}

// chaosProc is one webhookd process slot: what it runs, on which
// addresses, and the process now running there (restarted after faults).
type chaosProc struct {
	Name     string // serve-1, worker-2, ...
	kind     string // serve or worker
	APIAddr  string // serve only
	dashAddr string
	env      []string
	bin      string
	logPath  string
	http     *http.Client

	mu          sync.Mutex
	proc        *webhookdProcess
	incarnation int
	rss         []rssSample
}

// rssSample is one reading of a process's resident set.
type rssSample struct {
	at          time.Time
	incarnation int
	bytes       int64
}

// startChaosSystem brings everything up; on failure nothing is left.
func startChaosSystem(ctx context.Context, o *chaosOptions) (_ *chaosSystem, err error) {
	s := &chaosSystem{opts: o, http: newLoopbackClient(5 * time.Second)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "webhookd-chaos-*"); err != nil {
		return nil, err
	}
	progress("chaos: starting a throwaway PostgreSQL server (initdb)")
	if s.pg, err = startChaosPostgres(ctx); err != nil {
		return nil, err
	}
	if s.db, err = createDatabase(ctx, s.pg.AdminURL(), "webhookd_chaos"); err != nil {
		return nil, err
	}
	if s.redis, err = startRedis(ctx, s.dir); err != nil {
		return nil, err
	}
	if s.recv, err = startChaosReceiver(o.Duration*2/5, o.Seed); err != nil {
		return nil, err
	}
	if _, err = runCommand(ctx, o.Webhookd, s.directEnv(), "migrate"); err != nil {
		return nil, err
	}
	out, err := runCommand(ctx, o.Webhookd, s.directEnv(), "keys", "create", "--project", "chaos", "--rate-limit", "100000000")
	if err != nil {
		return nil, err
	}
	s.key = strings.TrimSpace(out)
	if err := s.setupOutboxSource(ctx); err != nil {
		return nil, err
	}
	s.px = newFaultProxies()
	redisAddr := strings.TrimSuffix(strings.TrimPrefix(s.redis.URL, "redis://"), "/0")
	for _, name := range []string{"serve-1", "serve-2", "worker-1", "worker-2"} {
		p := &chaosProc{Name: name, kind: strings.Split(name, "-")[0], bin: o.Webhookd,
			logPath: filepath.Join(s.dir, name+".log"), http: s.http}
		pgProxy, err := s.px.Add(name+"/postgres", s.pg.Addr())
		if err != nil {
			return nil, err
		}
		redisProxy, err := s.px.Add(name+"/redis", redisAddr)
		if err != nil {
			return nil, err
		}
		if p.dashAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		env := []string{"WEBHOOKD_DATABASE_URL=" + strings.Replace(s.db.URL, s.pg.Addr(), pgProxy, 1),
			"WEBHOOKD_REDIS_URL=redis://" + redisProxy + "/0", "WEBHOOKD_DASHBOARD_ADDR=" + p.dashAddr}
		if p.kind == "serve" {
			if p.APIAddr, err = freeAddr(); err != nil {
				return nil, err
			}
			env = append(env, "WEBHOOKD_API_ADDR="+p.APIAddr)
		} else {
			// The relay reaches the service's database through the
			// worker's PostgreSQL proxy: a fault on that link cuts both.
			env = append(env, s.outboxSourcesVia(pgProxy))
		}
		p.env = s.env(env...)
		s.procs = append(s.procs, p)
	}
	for _, p := range s.procs {
		if err := p.Start(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// env is the environment of every webhookd command: the caller's minus
// its WEBHOOKD_* settings, the soak's, and extra.
func (s *chaosSystem) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEBHOOKD_") {
			env = append(env, kv)
		}
	}
	env = append(env, "WEBHOOKD_ALLOW_PRIVATE_NETWORKS=true", "WEBHOOKD_LOG_LEVEL="+s.opts.LogLevel, "WEBHOOKD_LOG_FORMAT=json",
		"WEBHOOKD_RETRY_SCHEDULE="+s.opts.RetrySchedule, "WEBHOOKD_RESPONSE_TIMEOUT=3s",
		"WEBHOOKD_REQUEST_TIMEOUT=10s", "WEBHOOKD_DRAIN_TIMEOUT=10s", "WEBHOOKD_WORKER_CONCURRENCY=100",
		"WEBHOOKD_RECONCILE_INTERVAL=2s", "WEBHOOKD_ADMIN_TOKEN=chaos-soak-admin-token",
		// The breaker on, its probes as quick as the retry schedule: the
		// flapping and hanging endpoints open their circuits.
		"WEBHOOKD_CIRCUIT_PROBES=1s")
	return append(env, extra...)
}

// directEnv reaches PostgreSQL and Redis without the proxies: for migrate
// and keys create, before any fault.
func (s *chaosSystem) directEnv() []string {
	return s.env("WEBHOOKD_DATABASE_URL="+s.db.URL, "WEBHOOKD_REDIS_URL="+s.redis.URL)
}

// Serves is the serve slots.
func (s *chaosSystem) Serves() []*chaosProc { return s.procs[:2] }

// Close stops everything, processes first.
func (s *chaosSystem) Close() {
	if s.recv != nil {
		s.recv.Close()
	}
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(10 * time.Second) }()
	}
	wg.Wait()
	if s.px != nil {
		s.px.Close()
	}
	if s.redis != nil && s.redis.cmd != nil {
		select {
		case <-s.redis.done:
		default:
			s.redis.Stop()
		}
	}
	if s.pg != nil {
		s.pg.Close()
	}
	switch {
	case s.dir == "":
	case s.keep || os.Getenv("WEBHOOKD_CHAOS_KEEP") != "":
		os.Remove(filepath.Join(s.dir, "dump.rdb"))
		progress("chaos: kept the processes' logs in %s", s.dir)
	default:
		os.RemoveAll(s.dir)
	}
}

// Start starts the slot's process and waits until /readyz answers 200,
// starting it again while it exits at start (its PostgreSQL or Redis may
// be down: that is a fault, not a failure) until ctx ends or startWithin
// has passed: a process that cannot start for that long (its address
// taken) fails the soak instead of holding it for ever.
func (p *chaosProc) Start(ctx context.Context) error {
	deadline := time.Now().Add(startWithin)
	for {
		err := p.startOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start within %s: %w", p.Name, startWithin, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// startWithin bounds Start: longer than any fault keeps a process from
// starting.
const startWithin = 2 * time.Minute

func (p *chaosProc) startOnce(ctx context.Context) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(p.bin, p.kind)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start webhookd %s: %w", p.kind, err)
	}
	proc := &webhookdProcess{APIURL: "http://" + p.APIAddr, DashboardURL: "http://" + p.dashAddr,
		cmd: cmd, logPath: p.logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(proc.done) }()
	p.mu.Lock()
	p.proc = proc
	p.incarnation++
	p.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := proc.WaitReady(wctx, p.http); err != nil {
		proc.cmd.Process.Kill()
		<-proc.done
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

// current is the process now in the slot, or nil.
func (p *chaosProc) current() *webhookdProcess {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// Kill sends SIGKILL and waits for the process to go.
func (p *chaosProc) Kill() {
	if proc := p.current(); proc != nil {
		proc.cmd.Process.Signal(syscall.SIGKILL)
		<-proc.done
	}
}

// Stop sends SIGTERM and kills the process if it has not gone within grace.
func (p *chaosProc) Stop(grace time.Duration) {
	if proc := p.current(); proc != nil && proc.Exited() == nil {
		proc.Stop(grace)
	}
}

// Alive reports an error if the slot's process has exited.
func (p *chaosProc) Alive() error {
	proc := p.current()
	if proc == nil {
		return errors.New("never started")
	}
	return proc.Exited()
}

// SampleRSS records the process's resident set now, if it runs.
func (p *chaosProc) SampleRSS() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.Exited() != nil {
		return
	}
	if rss, err := vmRSS(p.proc.cmd.Process.Pid); err == nil {
		p.rss = append(p.rss, rssSample{at: time.Now(), incarnation: p.incarnation, bytes: rss})
	}
}

// vmRSS is a process's resident set (VmRSS) in bytes.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// proc is the slot named name.
func (s *chaosSystem) proc(name string) *chaosProc {
	for _, p := range s.procs {
		if p.Name == name {
			return p
		}
	}
	panic("no process slot " + name)
}
