package main

import (
	"context"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis in it.
	line := "4242 (postgres: x) y) S 17 4242 4242 0 -1 4194560 900 0 0 0 250 130 40 12 20 0 1 0 1234 0 0\n"
	st, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.self != 3800*time.Millisecond || st.reaped != 520*time.Millisecond {
		t.Fatalf("parsed %+v", st)
	}
	if _, err := parseStat("4242 (postgres) S 17"); err == nil {
		t.Fatal("a short line parsed")
	}
}

// TestServerCPUTime: the test's PostgreSQL runs on this machine (CI starts
// it here), so its postmaster is found and its CPU time grows with work.
func TestServerCPUTime(t *testing.T) {
	ctx := context.Background()
	pid := postmasterPID(ctx, testenv.DatabaseURL())
	if pid == 0 {
		t.Skip("PostgreSQL is not a process of this machine")
	}
	before, err := serverCPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	conn := testenv.DB(t).Pool()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 2000000)"); err != nil {
			t.Fatal(err)
		}
		after, err := serverCPUTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server CPU time stayed at %v while it worked", after)
		}
	}
}
