package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/internal/testenv"
)

// TestDeliversThroughRedisSentinel runs webhookd with a redis-sentinel://
// URL against a master and a sentinel the test starts from the installed
// redis-server: the API, the worker and the rate limiter find the master
// through the sentinel and every event is delivered.
func TestDeliversThroughRedisSentinel(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	masterPort, sentinelPort := freePort(t), freePort(t)
	startRedisServer(t, masterPort, "--save", "", "--appendonly", "no")
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // a sentinel rewrites its config file
	if err := os.WriteFile(conf, []byte("sentinel monitor webhookd 127.0.0.1 "+masterPort+" 1\n"+
		"sentinel down-after-milliseconds webhookd 5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startRedisServer(t, sentinelPort, conf, "--sentinel", "--dir", dir)
	redisURL := "redis-sentinel://127.0.0.1:" + sentinelPort + "/0?master=webhookd"
	d.startAPI(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(2)
	for i := range 20 {
		if status, _ := d.sendEvent(uuid.NewString(), i); status != http.StatusAccepted {
			t.Fatalf("POST /v1/events through the sentinel: %d", status)
		}
	}
	d.verify(30 * time.Second)
	// The schedule and the rate limits live on the master the sentinel names.
	master := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + masterPort})
	defer master.Close()
	if n, err := master.DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Fatalf("the master holds %d keys (%v); want webhookd's", n, err)
	}
}
