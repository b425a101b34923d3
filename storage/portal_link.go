package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// portalTokenPrefix starts every portal link token.
const portalTokenPrefix = "wpl_"

// CreatePortalLink makes a one-time link token into the portal for the
// project, valid until expires, and returns it in clear text; only its
// SHA-256 is stored. Links of the project that expired a day ago or more
// are dropped on the way.
func (s *Store) CreatePortalLink(ctx context.Context, projectID string, now, expires time.Time) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := portalTokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	hash := sha256.Sum256([]byte(token))
	_, err := s.q.Exec(ctx, `WITH gone AS (
			DELETE FROM portal_links WHERE project_id = $2 AND expires_at < $3::timestamptz - interval '1 day'
		)
		INSERT INTO portal_links (token_hash, project_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
		hash[:], projectID, now, expires)
	if err != nil {
		return "", translate(err, "portal link")
	}
	return token, nil
}

// Why a portal link cannot be opened.
var (
	ErrPortalLinkSpent   = errors.New("portal link already used")
	ErrPortalLinkExpired = errors.New("portal link expired")
	ErrPortalLinkUnknown = errors.New("no such portal link")
)

// SpendPortalLink opens a link token: once, before it expires. It returns
// the link's project, or ErrPortalLinkSpent, ErrPortalLinkExpired or
// ErrPortalLinkUnknown (a forged or mistyped token, or one purged). The
// token is looked up by its SHA-256, so no comparison ever touches the
// token itself.
func (s *Store) SpendPortalLink(ctx context.Context, token string, now time.Time) (webhookd.Project, error) {
	var p webhookd.Project
	if !strings.HasPrefix(token, portalTokenPrefix) || len(token) > 100 {
		return p, ErrPortalLinkUnknown
	}
	hash := sha256.Sum256([]byte(token))
	var spent, expired bool
	err := s.q.QueryRow(ctx, `WITH l AS (
			SELECT project_id, spent_at IS NOT NULL AS spent, expires_at <= $2 AS expired
			FROM portal_links WHERE token_hash = $1
		), spend AS (
			UPDATE portal_links SET spent_at = $2
			WHERE token_hash = $1 AND spent_at IS NULL AND expires_at > $2 RETURNING project_id
		)
		SELECT pr.id, pr.name, l.spent OR NOT EXISTS (SELECT 1 FROM spend) AND NOT l.expired, l.expired
		FROM l JOIN projects pr ON pr.id = l.project_id`, hash[:], now).Scan(&p.ID, &p.Name, &spent, &expired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return webhookd.Project{}, ErrPortalLinkUnknown
	case err != nil:
		return webhookd.Project{}, fmt.Errorf("spend portal link: %w", err)
	case expired:
		return webhookd.Project{}, ErrPortalLinkExpired
	case spent:
		return webhookd.Project{}, ErrPortalLinkSpent
	}
	return p, nil
}

// ProjectByName returns the project named name, or not_found.
func (s *Store) ProjectByName(ctx context.Context, name string) (webhookd.Project, error) {
	var p webhookd.Project
	var ttl int
	err := s.q.QueryRow(ctx, `SELECT id, name, rate_limit_per_minute, idempotency_ttl_seconds, created_at
		FROM projects WHERE name = $1`, name).Scan(&p.ID, &p.Name, &p.RateLimitPerMinute, &ttl, &p.CreatedAt)
	p.IdempotencyTTL = time.Duration(ttl) * time.Second
	return p, translate(err, "project")
}

// ProjectName returns the name of project id, or not_found.
func (s *Store) ProjectName(ctx context.Context, id string) (string, error) {
	var name string
	err := s.q.QueryRow(ctx, `SELECT name FROM projects WHERE id = $1`, id).Scan(&name)
	return name, translate(err, "project")
}
