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

// TestRedisSentinelFailover runs webhookd with a redis-sentinel:// URL
// against a master, a replica and a sentinel the test starts from the
// installed redis-server. Under load the master is killed: the sentinel
// promotes the replica, webhookd follows it without a restart, and every
// event is delivered (what the asynchronous replica had not yet received
// is rebuilt by the reconciler from PostgreSQL).
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	_, dbURL := testenv.Schema(t)
	d := newDrill(t, dbURL)
	ctx := context.Background()
	masterPort, replicaPort, sentinelPort := freePort(t), freePort(t), freePort(t)
	master := startRedisServer(t, masterPort, "--save", "", "--appendonly", "no")
	startRedisServer(t, replicaPort, "--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", masterPort)
	replica := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + replicaPort})
	defer replica.Close()
	waitFor(t, 20*time.Second, "the replica in sync", func() bool {
		info, _ := replica.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // a sentinel rewrites its config file
	if err := os.WriteFile(conf, []byte("sentinel monitor webhookd 127.0.0.1 "+masterPort+" 1\n"+
		"sentinel down-after-milliseconds webhookd 1000\n"+
		"sentinel failover-timeout webhookd 10000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startRedisServer(t, sentinelPort, conf, "--sentinel", "--dir", dir)
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + sentinelPort})
	defer sentinel.Close()
	waitFor(t, 20*time.Second, "the sentinel to know the replica", func() bool {
		rs, _ := sentinel.Replicas(ctx, "webhookd").Result()
		return len(rs) == 1
	})

	redisURL := "redis-sentinel://127.0.0.1:" + sentinelPort + "/0?master=webhookd"
	d.startAPI(redisURL)
	d.startWorker(redisURL)
	d.addEndpoints(2)
	d.startLoad(25 * time.Millisecond)
	d.carryOn(20, "through the sentinel")
	// The schedule and the rate limits live on the master the sentinel names.
	m := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + masterPort})
	n, err := m.DBSize(ctx).Result()
	m.Close()
	if err != nil || n == 0 {
		t.Fatalf("the master holds %d keys (%v); want webhookd's", n, err)
	}

	master.kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, "the sentinel to promote the replica", func() bool {
		addr, _ := sentinel.GetMasterAddrByName(ctx, "webhookd").Result()
		return len(addr) == 2 && addr[1] == replicaPort
	})
	t.Logf("the replica was promoted %v after the master was killed", time.Since(killed).Round(time.Millisecond))
	d.carryOn(20, "after the failover")
	d.stopLoad()
	d.verify(60 * time.Second)
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
