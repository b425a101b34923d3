package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// environment is where and from what the figures came.
type environment struct {
	Date     time.Time // UTC
	Commit   string    // short hash, +dirty for uncommitted changes (the report aside)
	Machine  string
	Go       string // the Go that built the webhookd binary
	Postgres string
	Redis    string // filled in by the first ceiling measurement
	Asynq    string // the asynq the ceiling ran on (this tool's own)
	Command  string

	Candidate, Baseline string // with -baseline, each binary as describeBinary has it
}

// describeEnvironment gathers everything but the Redis version. Only an
// unreachable PostgreSQL is an error; anything else unknown says so.
func describeEnvironment(ctx context.Context, o *Options) (environment, error) {
	pg, err := postgresVersion(ctx, o.DatabaseURL)
	if err != nil {
		return environment{}, err
	}
	env := environment{Date: time.Now().UTC(), Commit: gitCommit(o.Out), Machine: machine(),
		Go: goVersion(o.Webhookd), Postgres: pg, Redis: "unknown", Asynq: asynqVersion(), Command: commandLine()}
	if o.Baseline != "" {
		env.Candidate, env.Baseline = describeBinary(o.Webhookd), describeBinary(o.Baseline)
	}
	return env, nil
}

// describeBinary is "`path`: revision fc972c5, go1.26.8": the revision is
// what the Go toolchain recorded in the binary (make bench-baseline builds
// with -buildvcs=true), with "+dirty" for uncommitted changes, or "not
// recorded".
func describeBinary(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "`" + path + "`: unknown (" + err.Error() + ")"
	}
	rev, dirty := "not recorded", ""
	for _, st := range bi.Settings {
		switch {
		case st.Key == "vcs.revision":
			rev = st.Value[:min(7, len(st.Value))]
		case st.Key == "vcs.modified" && st.Value == "true":
			dirty = "+dirty"
		}
	}
	return fmt.Sprintf("`%s`: revision %s%s, %s", path, rev, dirty, bi.GoVersion)
}

// asynqVersion is the version of asynq built into this tool.
func asynqVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/hibiken/asynq" {
				return m.Version
			}
		}
	}
	return "unknown"
}

// gitCommit is `git rev-parse --short HEAD`, plus "+dirty" when the working
// tree has changes other than to report, the file this run is about to
// rewrite.
func gitCommit(report string) string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	commit := strings.TrimSpace(string(out))
	args := []string{"status", "--porcelain", "--", ":/"}
	if filepath.IsLocal(report) { // git refuses paths outside the tree
		args = append(args, ":(exclude)"+report)
	}
	if status, err := exec.Command("git", args...).Output(); err == nil && len(status) > 0 {
		commit += "+dirty"
	}
	return commit
}

// machine is "N CPUs (model), X GiB memory".
func machine() string {
	return fmt.Sprintf("%d CPUs (%s), %s memory", runtime.NumCPU(), procField("/proc/cpuinfo", "model name"),
		memory(procField("/proc/meminfo", "MemTotal")))
}

// procField is the value of the first "name: value" line of a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// memory turns /proc/meminfo's "24000000 kB" into "22.9 GiB".
func memory(kb string) string {
	n, err := strconv.ParseFloat(strings.TrimSuffix(kb, " kB"), 64)
	if err != nil {
		return kb
	}
	return fmt.Sprintf("%.1f GiB", n/(1<<20))
}

// goVersion is the Go version recorded in the binary at path.
func goVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return bi.GoVersion
}

// commandLine is the tool's own command line, quoted for a shell.
func commandLine() string {
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		if a == "" || strings.ContainsAny(a, " \t'\"$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args[i] = a
	}
	return strings.Join(args, " ")
}
