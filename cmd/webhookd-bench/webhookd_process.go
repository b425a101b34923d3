package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childAttrs puts a child in a process group of its own (so a Ctrl-C at the
// terminal reaches the tool, which stops its children in order) and has the
// kernel kill it if the tool dies without cleaning up.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// runCommand runs `webhookd args...` to completion with env and returns its
// stdout; a failure carries its stderr.
func runCommand(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = childAttrs()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("webhookd %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// webhookdProcess is a running `webhookd all` (or serve, or worker), its
// stderr going to logPath.
type webhookdProcess struct {
	APIURL       string // http://127.0.0.1:<port>; none for a worker
	DashboardURL string // http://127.0.0.1:<port>: the ops listener (/readyz, /metrics)
	command      string // all, serve or worker
	killed       bool   // by Kill: gone on purpose
	cmd          *exec.Cmd
	logPath      string
	done         chan struct{}
}

// startWebhookd starts `webhookd <command>` (all, serve or worker) with
// env, API and dashboard (or a worker's ops listener) on the given loopback
// addresses.
func startWebhookd(bin, command string, env []string, apiAddr, dashboardAddr, logPath string) (*webhookdProcess, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(bin, command)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start webhookd %s: %w", command, err)
	}
	p := &webhookdProcess{APIURL: "http://" + apiAddr, DashboardURL: "http://" + dashboardAddr, command: command,
		cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// WaitReady polls GET /readyz on the dashboard listener until it answers
// 200, the process exits, or 60 s pass.
func (p *webhookdProcess) WaitReady(ctx context.Context, client *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if code, _, err := get(ctx, client, p.DashboardURL+"/readyz"); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("webhookd %s exited at start: %s", p.command, p.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("webhookd /readyz never answered 200: %w: %s", ctx.Err(), p.LogTail(20))
		case <-tick.C:
		}
	}
}

// Exited reports an error if the process is gone.
func (p *webhookdProcess) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("webhookd %s exited (%v): %s", p.command, p.cmd.ProcessState, p.LogTail(20))
	default:
		return nil
	}
}

// PeakRSS is the process's VmHWM (peak resident set) in bytes.
func (p *webhookdProcess) PeakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("peak RSS: no VmHWM in /proc status")
}

// CPUTime is the user and system CPU time the process has used so far.
func (p *webhookdProcess) CPUTime() (time.Duration, error) {
	st, err := readStat(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	return st.self, nil
}

// ownCPUTime is the CPU time the tool itself has used so far.
func ownCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Kill ends the process with SIGKILL, as a crash would, and waits until
// it is gone.
func (p *webhookdProcess) Kill() {
	p.killed = true
	p.cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to shut down (SIGTERM) and kills it if it has not
// gone within grace.
func (p *webhookdProcess) Stop(grace time.Duration) {
	if p.killed {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// LogTail returns the last n lines webhookd wrote, for error messages.
func (p *webhookdProcess) LogTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(log empty)"
	}
	return "log tail:\n" + strings.Join(lines, "\n")
}
