// Command webhookd-conformance serves the SDK conformance scenario
// (sdks/conformance/cases.json) for the Node, Python and PHP SDKs' tests: a
// real API server on loopback, on a PostgreSQL schema and a Redis logical
// database of its own (internal/testenv: WEBHOOKD_TEST_DATABASE_URL,
// WEBHOOKD_TEST_REDIS_URL), its rate limit counted over the scenario's short
// window, and the control API of internal/conformance, which gives each
// case a project and a fault proxy of its own and checks what the runner
// reports.
//
//	webhookd-conformance [-cases FILE] [-addr ADDR] [-- COMMAND ARGS...]
//
// With a command it runs it with WEBHOOKD_CONFORMANCE_URL set to the
// control API and exits with its status (make test-sdks does this); without
// one it prints the URL and serves until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/internal/conformance"
	"github.com/webhookd/webhookd/internal/testenv"
)

func main() {
	os.Exit(run())
}

func run() int {
	casesPath := flag.String("cases", "sdks/conformance/cases.json", "the conformance cases")
	addr := flag.String("addr", "127.0.0.1:0", "listen address of the control API")
	flag.Parse()
	file, err := conformance.Load(*casesPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	env := &tb{}
	defer env.close()
	db := testenv.DB(env)
	rdb, _ := testenv.Redis(env)
	jobs := conformance.NewJobs(db)
	defer jobs.Close()
	srv, err := api.New(api.Config{DB: db, Redis: rdb, AllowPrivateNetworks: true, Enqueuer: jobs,
		RateLimitWindow: time.Duration(file.RateLimitWindowMS) * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	apiSrv := httptest.NewServer(srv)
	defer apiSrv.Close()
	ctl := conformance.NewServer(file, db, apiSrv.URL)
	defer ctl.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hs := &http.Server{Handler: ctl.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	url := "http://" + ln.Addr().String()

	if flag.NArg() == 0 {
		fmt.Printf("WEBHOOKD_CONFORMANCE_URL=%s\n", url)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
		return 0
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "WEBHOOKD_CONFORMANCE_URL="+url)
	if err := cmd.Run(); err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return max(ee.ExitCode(), 1)
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tb lets testenv, which wants a testing.TB, set up the server's schema and
// Redis database, and undoes it on close.
type tb struct {
	testing.TB
	cleanups []func()
}

func (t *tb) Helper()          {}
func (t *tb) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *tb) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "webhookd-conformance: "+format+"\n", args...)
}
func (t *tb) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	t.close()
	os.Exit(1)
}
func (t *tb) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }
func (t *tb) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}
