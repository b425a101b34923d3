package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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

// TestDeliversThroughRedisCluster runs webhookd with a redis-cluster:// URL
// against a one-node Redis Cluster (every slot on one node) the test
// starts from the installed redis-server.
func TestDeliversThroughRedisCluster(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	port := freePort(t)
	dir := t.TempDir()
	startRedisServer(t, port, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--save", "", "--appendonly", "no", "--dir", dir)
	node := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer node.Close()
	ctx := context.Background()
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cluster_state:ok", func() bool {
		info, _ := node.ClusterInfo(ctx).Result()
		return strings.Contains(info, "cluster_state:ok")
	})
	redisURL := "redis-cluster://127.0.0.1:" + port
	api, worker := d.startAPI(redisURL), d.startWorker(redisURL)
	d.addEndpoints(2)
	for i := range 20 {
		if status, _ := d.sendEvent(uuid.NewString(), i); status != http.StatusAccepted {
			t.Fatalf("POST /v1/events through the cluster: %d", status)
		}
	}
	d.verify(30 * time.Second)
	if n, err := node.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Fatalf("the cluster node holds %d keys (%v); want webhookd's", n, err)
	}
	for _, p := range []*proc{api, worker} { // multi-key commands must stay in one slot
		if strings.Contains(p.logs.String(), "CROSSSLOT") {
			t.Errorf("webhookd %s met CROSSSLOT errors:\n%s", p.cmd.Args[1], p.logs.String())
		}
	}
}

// TestBadRedisURLIsRefused: a Redis URL webhookd cannot use stops every
// command before it starts, names the variable and never shows the
// password.
func TestBadRedisURLIsRefused(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"redis-sentinel://:hunter2@127.0.0.1:26379": "needs ?master=NAME",
		"redis-cluster://127.0.0.1:7000/2":          "only database 0",
		"redis://:hunter2@a:1,b:2":                  "a list of hosts needs",
		"memcached://127.0.0.1":                     "unknown scheme",
	} {
		vars := map[string]string{"WEBHOOKD_DATABASE_URL": "postgres://127.0.0.1:1/none", "WEBHOOKD_REDIS_URL": raw}
		err := run(context.Background(), []string{"serve"}, env(vars), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "WEBHOOKD_REDIS_URL") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming WEBHOOKD_REDIS_URL and %q", raw, err, want)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
}
