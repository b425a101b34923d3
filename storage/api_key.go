package storage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
)

// APIKey describes a key without the key itself (only its hash is stored).
type APIKey struct {
	ID        string     // key_...
	Prefix    string     // the key's first 8 characters (whk_ and 4 more)
	Project   string     // the project's name
	CreatedAt time.Time  //
	RevokedAt *time.Time // nil while the key works
}

// apiKeyLength is the length of a key CreateAPIKey makes: whk_ and the
// base64 of 32 bytes.
const apiKeyLength = 4 + 43

// ListAPIKeys returns the keys of the project named name, oldest first,
// revoked ones included. An unknown project is ErrNotFound (not_found).
func (s *Store) ListAPIKeys(ctx context.Context, name string) ([]APIKey, error) {
	rows, err := s.q.Query(ctx, `SELECT k.id, k.prefix, p.name, k.created_at, k.revoked_at
		FROM projects p LEFT JOIN api_keys k ON k.project_id = p.id
		WHERE p.name = $1 ORDER BY k.created_at, k.id`, name)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	var (
		keys  []APIKey
		found bool
	)
	for rows.Next() {
		var k APIKey
		var id, prefix *string
		var created *time.Time
		if err := rows.Scan(&id, &prefix, &k.Project, &created, &k.RevokedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		found = true
		if id == nil { // the project has no key
			continue
		}
		k.ID, k.Prefix, k.CreatedAt = *id, *prefix, *created
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	if !found {
		return nil, &webhookd.Error{Code: webhookd.CodeNotFound, Message: fmt.Sprintf("no project is named %q", name)}
	}
	return keys, nil
}

// RevokeAPIKey revokes the one key that ref names at now: its id (key_...),
// the prefix `keys list` shows (whk_ and 1 to 4 more characters), or the
// whole key. It returns the key and whether it had been
// revoked already (then nothing changes). A ref that names no key is
// not_found; one that names several keys that still work is
// validation_failed, listing them; any other ref is validation_failed.
func (s *Store) RevokeAPIKey(ctx context.Context, ref string, now time.Time) (k APIKey, already bool, err error) {
	var where string
	var arg any
	switch {
	case strings.HasPrefix(ref, prefixKey):
		where, arg = "k.id = $1", ref
	case strings.HasPrefix(ref, "whk_") && len(ref) == apiKeyLength:
		hash := sha256.Sum256([]byte(ref))
		where, arg = "k.key_hash = $1", hash[:]
	case strings.HasPrefix(ref, "whk_") && len(ref) > 4 && len(ref) <= 8:
		where, arg = "starts_with(k.prefix, $1)", ref
	default:
		return k, false, webhookd.Invalid("key", "give the key's id (key_...), the prefix `webhookd keys list` shows (whk_ and 4 characters), or the whole key")
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT k.id, k.prefix, p.name, k.created_at, k.revoked_at
			FROM api_keys k JOIN projects p ON p.id = k.project_id WHERE `+where+`
			ORDER BY k.revoked_at IS NULL DESC, k.created_at FOR UPDATE OF k`, arg)
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) {
			var k APIKey
			err := r.Scan(&k.ID, &k.Prefix, &k.Project, &k.CreatedAt, &k.RevokedAt)
			return k, err
		})
		if err != nil {
			return err
		}
		var live []string
		for _, x := range keys {
			if x.RevokedAt == nil {
				live = append(live, fmt.Sprintf("%s (%s, project %s)", x.ID, x.Prefix, x.Project))
			}
		}
		switch {
		case len(keys) == 0:
			return &webhookd.Error{Code: webhookd.CodeNotFound, Message: fmt.Sprintf("no API key matches %q", ref)}
		case len(live) > 1:
			return webhookd.Invalid("key", "%q matches %d keys that work: %s; give a key id", ref, len(live), strings.Join(live, ", "))
		case len(live) == 0 && len(keys) > 1:
			return webhookd.Invalid("key", "%q matches %d keys, all revoked already; give a key id", ref, len(keys))
		}
		k = keys[0]
		if k.RevokedAt != nil {
			already = true
			return nil
		}
		k.RevokedAt = &now
		_, err = tx.Exec(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1`, k.ID, now)
		return err
	})
	if err != nil {
		var ae *webhookd.Error
		if errors.As(err, &ae) {
			return APIKey{}, false, ae
		}
		return APIKey{}, false, fmt.Errorf("revoke api key: %w", err)
	}
	return k, already, nil
}
