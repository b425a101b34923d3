// Package testenv gives integration tests their own PostgreSQL schema and
// their own Redis logical database on the shared local servers, so packages
// and tests can run in parallel. A missing server fails the test: it never
// skips.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// DatabaseURL is WEBHOOKD_TEST_DATABASE_URL, or the local test database.
func DatabaseURL() string {
	if u := os.Getenv("WEBHOOKD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is WEBHOOKD_TEST_REDIS_URL, or the local Redis.
func RedisURL() string {
	if u := os.Getenv("WEBHOOKD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379"
}

// Schema creates an empty schema for the test, dropped when it ends, and
// returns its name and a database URL whose connections work in it.
func Schema(t testing.TB) (name, dbURL string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: PostgreSQL at %s: %v (start it, or set WEBHOOKD_TEST_DATABASE_URL)", DatabaseURL(), err)
	}
	defer conn.Close(ctx)
	name = "t_" + randomHex(8)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DatabaseURL())
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// A process the test killed may have left a statement running in
		// the schema for a moment: dropping partitioned tables then can
		// deadlock with it (PostgreSQL aborts one side). Try again.
		for try := 1; ; try++ {
			_, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE")
			var pe *pgconn.PgError
			if err == nil || try == 10 || !errors.As(err, &pe) || pe.Code != "40P01" {
				if err != nil {
					t.Errorf("testenv: drop schema %s: %v", name, err)
				}
				return
			}
			time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		}
	})
	u, err := url.Parse(DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: database url: %v", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return name, u.String()
}

// DB returns a migrated store in a schema of its own.
func DB(t testing.TB) *storage.DB {
	t.Helper()
	name, _ := Schema(t)
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: DatabaseURL(), SearchPath: name, MaxConns: 30})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return db
}

// Redis leases a logical database of the local Redis (1–15) for the test,
// empties it, and returns a client on it and its URL. The lease is a key in
// database 0 that expires on its own if the test process dies.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	ctx := context.Background()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("testenv: redis url: %v", err)
	}
	admin := redis.NewClient(&redis.Options{Addr: opts.Addr, Password: opts.Password, DB: 0})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: Redis at %s: %v (start it, or set WEBHOOKD_TEST_REDIS_URL)", opts.Addr, err)
	}
	owner := randomHex(8)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for n := 1; n <= 15; n++ {
			key := "webhookd:testenv:lease:" + strconv.Itoa(n)
			ok, err := admin.SetNX(ctx, key, owner, 10*time.Minute).Result()
			if err != nil {
				t.Fatalf("testenv: lease redis db: %v", err)
			}
			if !ok {
				continue
			}
			client := redis.NewClient(&redis.Options{Addr: opts.Addr, Password: opts.Password, DB: n})
			if err := client.FlushDB(ctx).Err(); err != nil {
				t.Fatalf("testenv: flush redis db %d: %v", n, err)
			}
			t.Cleanup(func() {
				client.FlushDB(context.Background())
				client.Close()
				release := redis.NewClient(&redis.Options{Addr: opts.Addr, Password: opts.Password, DB: 0})
				defer release.Close()
				if v, _ := release.Get(context.Background(), key).Result(); v == owner {
					release.Del(context.Background(), key)
				}
			})
			return client, fmt.Sprintf("redis://%s/%d", opts.Addr, n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: no free Redis logical database after 2 minutes")
		}
		time.Sleep(100 * time.Millisecond) // poll for a lease to free up
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Record makes attempt a the delivery's next one and moves the delivery as
// tr says, the way the worker records an attempt: it leases the delivery,
// then records. a's delivery id, number and request id are filled in; its
// URL, trigger and start time default to a loopback URL, auto and tr.Now
// (itself defaulting to now).
func Record(t testing.TB, db *storage.DB, deliveryID string, a webhookd.Attempt, tr storage.Transition) webhookd.Attempt {
	t.Helper()
	ctx := context.Background()
	if tr.Now.IsZero() {
		tr.Now = time.Now().UTC()
	}
	token := storage.NewRequestID()
	ls, err := db.ClaimDeliveries(ctx, tr.Now, tr.Now.Add(time.Minute),
		[]storage.Claim{{DeliveryID: deliveryID, Token: token, Mode: storage.ClaimAny}})
	if err != nil || !ls[0].Held {
		t.Fatalf("testenv: lease %s: %+v, %v", deliveryID, ls, err)
	}
	a.DeliveryID, a.Number, a.RequestID = deliveryID, ls[0].Delivery.AttemptsCount+1, token
	if a.URL == "" {
		a.URL = "http://127.0.0.1:9/hook"
	}
	if a.Trigger == "" {
		a.Trigger = webhookd.TriggerAuto
	}
	if a.StartedAt.IsZero() {
		a.StartedAt = tr.Now
	}
	tr.Auto = tr.Auto || a.Trigger == webhookd.TriggerAuto || a.Trigger == webhookd.TriggerTest
	ok, _, err := db.RecordAttempts(ctx, []storage.Record{{Lease: &ls[0], Attempt: &a, Transition: tr}})
	if err != nil || !ok[0] {
		t.Fatalf("testenv: record %s: %v, %v", deliveryID, ok, err)
	}
	return a
}

// WaitFor polls cond every 10 ms until it holds, or fails the test once
// within has passed, naming what it waited for.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitEvery(t, 10*time.Millisecond, within, what, cond)
}

// WaitEvery is WaitFor polling every interval: longer for a condition that
// costs more to look at.
func WaitEvery(t testing.TB, interval, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(interval)
	}
}
