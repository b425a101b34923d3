package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd"
)

// keyRevocationChannel is the Redis channel on which a key revocation is
// announced; every API process drops its cached keys when a message
// arrives (PublishKeyRevoked). Channels ignore Redis's logical databases,
// so the database number is part of the name: deployments sharing a Redis
// server on different databases do not hear each other.
func keyRevocationChannel(rdb redis.UniversalClient) string {
	db := 0
	if c, ok := rdb.(*redis.Client); ok { // single node or Sentinel
		db = c.Options().DB
	}
	return fmt.Sprintf("webhookd:keys:revoked:%d", db)
}

// DefaultKeyCacheTTL bounds how long a key's answer is reused without
// asking PostgreSQL: a revocation announced through PublishKeyRevoked takes
// effect at once, and one whose announcement was lost (Redis down) within
// this.
const DefaultKeyCacheTTL = time.Second

// keyCacheMax bounds the entries kept; past it the cache starts afresh.
const keyCacheMax = 10_000

// keyCache remembers, per API key hash, the project it belongs to or that
// it belongs to none, for keyCacheTTL.
type keyCache struct {
	mu      sync.Mutex
	entries map[[32]byte]keyEntry
}

type keyEntry struct {
	project webhookd.Project
	found   bool
	expires time.Time
}

func newKeyCache() *keyCache { return &keyCache{entries: make(map[[32]byte]keyEntry)} }

// get returns the cached answer for hash, if a fresh one is there.
func (c *keyCache) get(hash [32]byte, now time.Time) (keyEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || !now.Before(e.expires) {
		return keyEntry{}, false
	}
	return e, true
}

func (c *keyCache) put(hash [32]byte, e keyEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= keyCacheMax {
		clear(c.entries)
	}
	c.entries[hash] = e
}

// reset forgets every key.
func (c *keyCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}

// keyHash is the cache's key for an API key.
func keyHash(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// lookupKey asks PostgreSQL for a key's project and caches the answer;
// found is false for a key that is unknown or revoked.
func (s *Server) lookupKey(ctx context.Context, key string) (p webhookd.Project, found bool, err error) {
	// Real time, not the API's clock: the bound is on staleness a person
	// observes, and tests with a frozen clock must still see revocations.
	now := time.Now()
	p, err = s.db.Store().ProjectByAPIKey(ctx, key)
	switch {
	case errors.Is(err, webhookd.ErrNotFound):
		s.keys.put(keyHash(key), keyEntry{expires: now.Add(s.cfg.KeyCacheTTL)})
		return webhookd.Project{}, false, nil
	case err != nil:
		return webhookd.Project{}, false, err
	}
	s.keys.put(keyHash(key), keyEntry{project: p, found: true, expires: now.Add(s.cfg.KeyCacheTTL)})
	return p, true, nil
}

// watchRevocations drops the cached keys whenever a revocation is
// announced, and whenever the subscription is (re)made, since
// announcements may have been missed meanwhile; it closes subscribed after
// the first subscription's drop. It returns when ctx ends.
func watchRevocations(ctx context.Context, rdb redis.UniversalClient, cache *keyCache, log *slog.Logger, subscribed chan<- struct{}) {
	sub := rdb.Subscribe(ctx, keyRevocationChannel(rdb))
	defer sub.Close()
	ch := sub.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			cache.reset()
			if _, revoked := m.(*redis.Message); revoked {
				log.Debug("api key revoked elsewhere; key cache dropped")
			} else if subscribed != nil {
				close(subscribed)
				subscribed = nil
			}
		}
	}
}

// PublishKeyRevoked announces a revocation to every API process, which
// then stops accepting the key at once. Without Redis the announcement is
// lost and the key stops working within Config.KeyCacheTTL anyway.
func PublishKeyRevoked(ctx context.Context, rdb redis.UniversalClient, keyPrefix string) error {
	return rdb.Publish(ctx, keyRevocationChannel(rdb), keyPrefix).Err()
}
