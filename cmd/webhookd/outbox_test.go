package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql, as a service might use it

	"github.com/webhookd/webhookd/client"
	"github.com/webhookd/webhookd/internal/testenv"
)

// outboxSource makes a service's database (a schema of its own) and runs
// `webhookd outbox init` on it twice; it returns its URL and a
// database/sql handle on it.
func outboxSource(t testing.TB) (string, *sql.DB) {
	t.Helper()
	_, srcURL := testenv.Schema(t)
	for range 2 {
		var stderr bytes.Buffer
		if code := cli(context.Background(), []string{"outbox", "init", "--database-url", srcURL}, env(nil), io.Discard, &stderr); code != 0 {
			t.Fatalf("outbox init: exit %d: %s", code, stderr.String())
		}
	}
	src, err := sql.Open("pgx", srcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return srcURL, src
}

// commitRows inserts rows first..first+n-1 ({"n":i}) in one transaction
// of the service, committed unless rollback.
func commitRows(t *testing.T, src *sql.DB, first, n int, rollback bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := src.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := first; i < first+n; i++ {
		if err := client.Outbox(ctx, tx, client.OutboxEvent{Type: "order.created", Data: map[string]int{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	if !rollback {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func outboxLeft(t *testing.T, src *sql.DB) int {
	t.Helper()
	var n int
	if err := src.QueryRow(`SELECT count(*) FROM webhookd_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutboxRowsAreDelivered: `webhookd all` with WEBHOOKD_OUTBOX_SOURCES
// delivers each committed row once to a subscribed receiver, and nothing
// of a rolled-back transaction.
func TestOutboxRowsAreDelivered(t *testing.T) {
	t.Parallel()
	srcURL, src := outboxSource(t)
	m, key := startMain(t, Roles{API: true, Worker: true, Ops: true}, func(c *Config) {
		c.AllowPrivateNetworks, c.OutboxSources = true, "e2e="+srcURL
	})
	var (
		mu  sync.Mutex
		got = map[int]int{} // n → deliveries
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Data struct{ N int } `json:"data"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got[body.Data.N]++
		mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	callAPI(t, m.APIAddr, key, "POST", "/v1/endpoints", fmt.Sprintf(`{"url":%q}`, rc.URL), true)

	commitRows(t, src, 1000, 3, true)
	commitRows(t, src, 0, 20, false)
	commitRows(t, src, 20, 5, false)
	waitFor(t, 20*time.Second, "25 rows delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 25
	})
	waitFor(t, 10*time.Second, "the outbox emptied", func() bool { return outboxLeft(t, src) == 0 })
	mu.Lock()
	defer mu.Unlock()
	for n, c := range got {
		if n < 0 || n >= 25 || c != 1 {
			t.Errorf("row %d delivered %d times", n, c)
		}
	}
}

// TestOutboxWorkerKilledMidMoveLosesNothing kills a worker process with
// SIGKILL while it moves a source's rows, then starts another: every row
// becomes exactly one event, and the outbox empties.
func TestOutboxWorkerKilledMidMoveLosesNothing(t *testing.T) {
	t.Parallel()
	db, p, dbURL := drillDB(t)
	_, redisURL := testenv.Redis(t)
	srcURL, src := outboxSource(t)
	const rows = 3000
	for i := 0; i < rows; i += 500 {
		commitRows(t, src, i, 500, false)
	}
	events := func() (n, distinct int) {
		if err := db.Pool().QueryRow(context.Background(), `SELECT count(*), count(DISTINCT data->>'n') FROM events WHERE project_id = $1`,
			p.ID).Scan(&n, &distinct); err != nil {
			t.Fatal(err)
		}
		return n, distinct
	}
	sources := "WEBHOOKD_OUTBOX_SOURCES=" + p.Name + "=" + srcURL
	first := startProcess(t, "worker", dbURL, redisURL, sources)
	waitFor(t, 30*time.Second, "the first worker moving rows", func() bool { n, _ := events(); return n > 0 })
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.exited
	n, _ := events()
	left := outboxLeft(t, src)
	t.Logf("killed with %d rows left in the outbox and %d events (%d rows accepted but not yet deleted)", left, n, n-(rows-left))

	startProcess(t, "worker", dbURL, redisURL, sources)
	waitFor(t, 60*time.Second, "the outbox emptied", func() bool { return outboxLeft(t, src) == 0 })
	if n, distinct := events(); n != rows || distinct != rows {
		t.Fatalf("%d events (%d distinct) for %d rows", n, distinct, rows)
	}
}

// TestOutboxSourceRestartedLosesNothing stops the service's PostgreSQL
// (a throwaway server) while a worker moves its rows, and starts it
// again: the worker tries again with backoff, and every row committed,
// before the stop or after the restart, becomes exactly one event.
func TestOutboxSourceRestartedLosesNothing(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t)
	db, p, dbURL := drillDB(t)
	_, redisURL := testenv.Redis(t)
	srcURL := pg.URL()
	if code := cli(context.Background(), []string{"outbox", "init", "--database-url", srcURL}, env(nil), io.Discard, io.Discard); code != 0 {
		t.Fatalf("outbox init: exit %d", code)
	}
	src, err := sql.Open("pgx", srcURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	const before, after = 3000, 500
	for i := 0; i < before; i += 500 {
		commitRows(t, src, i, 500, false)
	}
	events := func() (n, distinct int) {
		if err := db.Pool().QueryRow(context.Background(), `SELECT count(*), count(DISTINCT data->>'n') FROM events WHERE project_id = $1`,
			p.ID).Scan(&n, &distinct); err != nil {
			t.Fatal(err)
		}
		return n, distinct
	}
	w := startProcess(t, "worker", dbURL, redisURL, "WEBHOOKD_OUTBOX_SOURCES="+p.Name+"="+srcURL)
	waitFor(t, 30*time.Second, "the worker moving rows", func() bool { n, _ := events(); return n > 0 })
	pg.stop()
	moved, _ := events()
	t.Logf("source stopped with %d of %d rows accepted", moved, before)
	waitFor(t, 30*time.Second, "the worker noticing its source down", func() bool {
		return bytes.Contains([]byte(w.logs.String()), []byte("outbox: moving rows failed"))
	})
	pg.start()
	src.Close() // its idle connections died with the server: the service reconnects
	if src, err = sql.Open("pgx", srcURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	commitRows(t, src, before, after, false)
	waitFor(t, 60*time.Second, "the outbox emptied", func() bool { return outboxLeft(t, src) == 0 })
	if n, distinct := events(); n != before+after || distinct != before+after {
		t.Fatalf("%d events (%d distinct) for %d rows", n, distinct, before+after)
	}
}
