package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestBreakerThroughAnOutage runs the drills' load with the circuit breaker
// on (open after 5 failures, probes every second) against a receiver whose
// port closes for 10 s, and kills the worker with SIGKILL while the circuit
// is open: the circuit (in PostgreSQL) outlives the worker, so the
// deliveries of the outage spend at most a few attempts each, and once the
// receiver is back every delivery gets through without a manual step.
func TestBreakerThroughAnOutage(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	breaker := []string{"WEBHOOKD_CIRCUIT_AFTER=5", "WEBHOOKD_CIRCUIT_PROBES=1s"}
	addr := "127.0.0.1:" + freePort(t)
	srv := &http.Server{Handler: http.HandlerFunc(d.receive)}
	listen := reopenable(t, srv, addr)
	ln := listen()
	t.Cleanup(func() { srv.Close() })
	d.base = "http://" + addr
	_, redisURL := testenv.Redis(t)
	d.startAPI(redisURL, breaker...)
	w := d.startWorker(redisURL, breaker...)
	d.addEndpoints(1)

	d.startLoad(100 * time.Millisecond)
	d.carryOn(20, "before the outage")
	ln.Close() // nothing listens: every attempt is refused
	srv.SetKeepAlivesEnabled(false)
	ctx := context.Background()
	open := func() bool {
		var c string
		d.db.Pool().QueryRow(ctx, `SELECT circuit FROM endpoints LIMIT 1`).Scan(&c)
		return c != "closed"
	}
	waitFor(t, 20*time.Second, "the circuit open", open)
	var opened time.Time
	if err := d.db.Pool().QueryRow(ctx, `SELECT circuit_opened_at FROM endpoints LIMIT 1`).Scan(&opened); err != nil {
		t.Fatal(err)
	}
	outageFrom := d.accepted()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.exited
	d.startWorker(redisURL, breaker...)
	time.Sleep(10 * time.Second) // the outage goes on: its length is what the breaker is measured over
	// The attempts started while the circuit was open: those sent before it
	// opened, still being recorded and counted when it did, are not the
	// breaker's to stop (a loaded machine had 30 of them under way).
	var failed, before int
	if err := d.db.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE started_at >= $1 AND started_at < $2),
			count(*) FILTER (WHERE started_at < $1)
		FROM attempts WHERE status_code IS NULL`, opened, time.Now()).Scan(&failed, &before); err != nil {
		t.Fatal(err)
	}
	during := d.accepted() - outageFrom
	srv.SetKeepAlivesEnabled(true)
	listen()
	d.carryOn(20, "after the receiver came back")
	d.stopLoad()
	d.verify(60 * time.Second)
	// 10 s of probes a second apart (and the time the test took to see the
	// circuit open): about 10 to 15.
	if failed > 20 {
		t.Errorf("%d failed attempts started in 10 s of an open circuit over %d new deliveries; want about one probe a second", failed, during)
	}
	t.Logf("circuit open: %d failed attempts started in 10 s while %d deliveries were accepted for the endpoint (%d before it opened)",
		failed, during, before)
}
