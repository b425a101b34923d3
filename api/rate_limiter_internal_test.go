package api

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestRateLimiterCallerLeftIsNotRedisDown: a request whose client went
// away before its limiter call (or while it waited for a take ahead) does
// not count as Redis failing, which would have every other request skip
// the limit for a second and log that Redis cannot be reached.
func TestRateLimiterCallerLeftIsNotRedisDown(t *testing.T) {
	t.Parallel()
	rdb, _ := testenv.Redis(t)
	l, err := newRateLimiter(rdb, "t:", time.Minute, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.allow(ctx, "prj:gone", 6000, time.Now())
	if l.gate.down() {
		t.Fatal("a caller that left closed the limiter's Redis gate")
	}
	if res := l.allow(context.Background(), "prj:gone", 6000, time.Now()); !res.allowed || res.remaining != 5999 {
		t.Fatalf("the next request: allowed %v, remaining %d; want allowed with 5999 left (the one that left took none)",
			res.allowed, res.remaining)
	}
}
