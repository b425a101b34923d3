package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/webhookd/webhookd"
)

// Plan defaults (SPEC §2).
const (
	DefaultRateLimitPerMinute = 6000
	DefaultIdempotencyTTL     = 24 * time.Hour
	MaxIdempotencyTTL         = 72 * time.Hour
)

// ProjectPlan is what `keys create` may set on a project. Zero values keep
// the project's current value (or the default for a new project).
type ProjectPlan struct {
	RateLimitPerMinute int
	IdempotencyTTL     time.Duration
}

// Validate names the bad field.
func (p ProjectPlan) Validate() error {
	if p.RateLimitPerMinute < 0 {
		return webhookd.Invalid("rate_limit", "must be a positive number of requests per minute")
	}
	if p.IdempotencyTTL < 0 || p.IdempotencyTTL > MaxIdempotencyTTL || (p.IdempotencyTTL > 0 && p.IdempotencyTTL < time.Second) {
		return webhookd.Invalid("idempotency_ttl", "must be between 1s and 72h")
	}
	return nil
}

// CreateAPIKey creates the project named name if it does not exist (else
// applies the non-zero parts of plan to it) and a new API key for it. It
// returns the key in clear text; only its SHA-256 is stored.
func (s *Store) CreateAPIKey(ctx context.Context, name string, plan ProjectPlan) (string, webhookd.Project, error) {
	if name == "" || len(name) > 128 {
		return "", webhookd.Project{}, webhookd.Invalid("project", "must be 1 to 128 characters")
	}
	if err := plan.Validate(); err != nil {
		return "", webhookd.Project{}, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", webhookd.Project{}, err
	}
	key := "whk_" + base64.RawURLEncoding.EncodeToString(raw)
	hash := sha256.Sum256([]byte(key))
	var p webhookd.Project
	err := s.inTx(ctx, func(tx pgxTx) error {
		var ttl int
		err := tx.QueryRow(ctx, `
			INSERT INTO projects (id, name, rate_limit_per_minute, idempotency_ttl_seconds)
			VALUES ($1, $2, COALESCE(NULLIF($3, 0), $5), COALESCE(NULLIF($4, 0), $6))
			ON CONFLICT (name) DO UPDATE SET
				rate_limit_per_minute = COALESCE(NULLIF($3, 0), projects.rate_limit_per_minute),
				idempotency_ttl_seconds = COALESCE(NULLIF($4, 0), projects.idempotency_ttl_seconds)
			RETURNING id, name, rate_limit_per_minute, idempotency_ttl_seconds, created_at`,
			newID(prefixProject), name, plan.RateLimitPerMinute, int(plan.IdempotencyTTL/time.Second),
			DefaultRateLimitPerMinute, int(DefaultIdempotencyTTL/time.Second),
		).Scan(&p.ID, &p.Name, &p.RateLimitPerMinute, &ttl, &p.CreatedAt)
		if err != nil {
			return err
		}
		p.IdempotencyTTL = time.Duration(ttl) * time.Second
		_, err = tx.Exec(ctx, `INSERT INTO api_keys (id, project_id, key_hash, prefix) VALUES ($1, $2, $3, $4)`,
			newID(prefixKey), p.ID, hash[:], key[:8])
		return err
	})
	if err != nil {
		return "", webhookd.Project{}, translate(err, "api key")
	}
	return key, p, nil
}

// ProjectByAPIKey returns the project a live key belongs to, or ErrNotFound.
func (s *Store) ProjectByAPIKey(ctx context.Context, key string) (webhookd.Project, error) {
	hash := sha256.Sum256([]byte(key))
	var p webhookd.Project
	var ttl int
	err := s.q.QueryRow(ctx, `
		SELECT p.id, p.name, p.rate_limit_per_minute, p.idempotency_ttl_seconds, p.created_at
		FROM api_keys k JOIN projects p ON p.id = k.project_id
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL`, hash[:],
	).Scan(&p.ID, &p.Name, &p.RateLimitPerMinute, &ttl, &p.CreatedAt)
	if err != nil {
		return webhookd.Project{}, translate(err, "api key")
	}
	p.IdempotencyTTL = time.Duration(ttl) * time.Second
	return p, nil
}
