// Command webhookd-bench is the load tool behind `make bench`: it measures
// the real `webhookd all` binary end to end, on loopback only, in the
// scenarios of scenarioNames (throughput, latency and ingest; the adaptive
// per-endpoint limit against one slow endpoint and against a receiver of
// limited capacity; the fault drills kill, with `webhookd serve` and two
// `webhookd worker` processes, and flush), each repeated on a fresh
// database, Redis and webhookd, beside a measurement of asynq's own no-op
// throughput on the same machine, and writes the medians to BENCHMARKS.md.
//
// `webhookd-bench chaos` is the chaos soak (chaos.go); `webhookd-bench
// history` fills a database with days of generated history (history.go).
//
// Exit status: 0 when everything was measured (missed targets included),
// 1 when a measurement failed, 2 on bad flags, 3 with -strict when a target
// was missed (or, with -baseline, a figure was more than 10% worse than the
// baseline's), 130 when interrupted.
//
// With -baseline, every scenario run is measured on the baseline binary and
// on -webhookd alternately (odd runs the baseline first, even runs the
// candidate first), in the same session, and the report gives both medians
// and their ratio: the team's rule of comparing a change with the binary
// before it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one command line and returns the exit status.
func run(args []string) int {
	if len(args) > 0 && args[0] == "chaos" {
		return runChaos(args[1:])
	}
	if len(args) > 0 && args[0] == "history" {
		return runHistory(args[1:])
	}
	o := &Options{}
	fs := flag.NewFlagSet("webhookd-bench", flag.ContinueOnError)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := prepareBinary(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench:", err)
		return 1
	}
	rep, err := runBench(ctx, o)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "webhookd-bench: interrupted; nothing written")
		return 130
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench:", err)
		return 1
	}
	return finish(rep, o)
}

// prepareBinary builds -webhookd when -build is given and checks that it
// is there.
func prepareBinary(ctx context.Context, o *Options) error {
	if o.Build {
		gobin := os.Getenv("GO")
		if gobin == "" {
			gobin = "go"
		}
		cmd := exec.CommandContext(ctx, gobin, "build", "-o", o.Webhookd, "./cmd/webhookd")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", o.Webhookd, err)
		}
	}
	if _, err := os.Stat(o.Webhookd); err != nil {
		return fmt.Errorf("%w (build it with `make build`, or pass -build)", err)
	}
	if o.Baseline != "" {
		if _, err := os.Stat(o.Baseline); err != nil {
			return fmt.Errorf("-baseline: %w (build one with `make bench-baseline REV=<revision>`)", err)
		}
	}
	return nil
}

// finish writes the report and picks the exit status.
func finish(rep *report, o *Options) int {
	if err := writeReport(rep, o.Out); err != nil {
		fmt.Fprintln(os.Stderr, "webhookd-bench:", err)
		return 1
	}
	missed := rep.Missed()
	if len(missed) > 0 {
		fmt.Fprintf(os.Stderr, "webhookd-bench: targets missed or not measurable: %s\n", strings.Join(missed, "; "))
	}
	worse := rep.Regressions()
	if len(worse) > 0 {
		fmt.Fprintf(os.Stderr, "webhookd-bench: worse than the baseline by more than %s: %s\n",
			tolerancePercent(), strings.Join(worse, "; "))
	}
	switch {
	case rep.failures() > 0:
		fmt.Fprintf(os.Stderr, "webhookd-bench: %d measurements failed (see the report)\n", rep.failures())
		return 1
	case o.Strict && len(missed)+len(worse) > 0:
		return 3
	}
	return 0
}

// writeReport writes the report to path, or to stdout for "-".
func writeReport(rep *report, path string) error {
	if path == "-" {
		return rep.Write(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := errors.Join(rep.Write(f), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	progress("wrote %s", path)
	return nil
}
