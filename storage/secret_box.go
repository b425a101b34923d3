package storage

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// sealedPrefix starts every value sealed by a secretBox: "whenc:" + key id
// + ":" + base64url(nonce ‖ AES-256-GCM ciphertext). No signing secret
// (whsec_...) nor JSON body starts with it.
const sealedPrefix = "whenc:"

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// secretBox encrypts endpoint secrets, and the stored responses that carry
// them, at rest. A nil *secretBox stores values as they are and refuses to
// open sealed ones.
type secretBox struct {
	current string                 // the key id new values are sealed with
	keys    map[string]cipher.AEAD // every key id that can open values
}

// parseSecretBox reads WEBHOOKD_ENCRYPTION_KEY: "ID:KEY[,ID:KEY]...", KEY
// the base64 of 32 random bytes. The first key seals; all of them open
// (keep an old one listed until nothing is sealed with it: see `webhookd
// secrets reseal`). "" gives nil: no encryption.
func parseSecretBox(spec string) (*secretBox, error) {
	if spec == "" {
		return nil, nil
	}
	b := &secretBox{keys: map[string]cipher.AEAD{}}
	for i, part := range strings.Split(spec, ",") {
		id, encoded, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("encryption key %d: want ID:BASE64KEY with an ID of 1 to 32 of A-Z a-z 0-9 _ -", i+1)
		}
		raw, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			raw, err = base64.RawURLEncoding.DecodeString(strings.TrimRight(encoded, "="))
		}
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("encryption key %q: want the base64 of 32 bytes (head -c 32 /dev/urandom | base64)", id)
		}
		if _, dup := b.keys[id]; dup {
			return nil, fmt.Errorf("encryption key %q is listed twice", id)
		}
		block, _ := aes.NewCipher(raw) // 32 bytes: AES-256
		aead, _ := cipher.NewGCM(block)
		b.keys[id] = aead
		if i == 0 {
			b.current = id
		}
	}
	return b, nil
}

// seal encrypts plain with the current key; a nil box returns it as is.
func (b *secretBox) seal(plain []byte) []byte {
	if b == nil || plain == nil {
		return plain
	}
	aead := b.keys[b.current]
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	ct := aead.Seal(nonce, nonce, plain, nil)
	out := make([]byte, 0, len(sealedPrefix)+len(b.current)+1+base64.RawURLEncoding.EncodedLen(len(ct)))
	out = append(out, sealedPrefix+b.current+":"...)
	return base64.RawURLEncoding.AppendEncode(out, ct)
}

// errSealed says a sealed value cannot be opened: no key, or not its key.
var errSealed = errors.New("a value is encrypted with a key WEBHOOKD_ENCRYPTION_KEY does not hold")

// open decrypts a sealed value; any other value is returned as it is (it
// was stored before encryption was turned on).
func (b *secretBox) open(v []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(v, []byte(sealedPrefix))
	if !ok {
		return v, nil
	}
	id, encoded, ok := bytes.Cut(rest, []byte(":"))
	if !ok {
		return nil, errors.New("a sealed value is malformed")
	}
	if b == nil || b.keys[string(id)] == nil {
		return nil, fmt.Errorf("%w (key id %q)", errSealed, id)
	}
	ct, err := base64.RawURLEncoding.AppendDecode(nil, encoded)
	aead := b.keys[string(id)]
	if err != nil || len(ct) < aead.NonceSize() {
		return nil, errors.New("a sealed value is malformed")
	}
	plain, err := aead.Open(nil, ct[:aead.NonceSize()], ct[aead.NonceSize():], nil)
	if err != nil {
		return nil, fmt.Errorf("a sealed value does not open with key %q: %w", id, err)
	}
	return plain, nil
}

// sealString and openString are seal and open for text columns.
func (b *secretBox) sealString(s string) string { return string(b.seal([]byte(s))) }

func (b *secretBox) openString(s string) (string, error) {
	if !strings.HasPrefix(s, sealedPrefix) {
		return s, nil
	}
	p, err := b.open([]byte(s))
	return string(p), err
}

// ErrSecretUnreadable says an endpoint's secret cannot be opened with the
// keys this process was given: it is sealed with a key its
// WEBHOOKD_ENCRYPTION_KEY does not list (one left out during a key
// rotation, say), or it is damaged.
var ErrSecretUnreadable = errors.New("endpoint secret cannot be decrypted with the configured WEBHOOKD_ENCRYPTION_KEY")

// openSecrets opens an endpoint's current and previous secrets in place;
// its errors are ErrSecretUnreadable.
func (b *secretBox) openSecrets(secret *string, previous **string) error {
	var err error
	if *secret, err = b.openString(*secret); err != nil {
		return fmt.Errorf("%w: %w", ErrSecretUnreadable, err)
	}
	if *previous != nil {
		p, err := b.openString(**previous)
		if err != nil {
			return fmt.Errorf("%w (its previous secret): %w", ErrSecretUnreadable, err)
		}
		*previous = &p
	}
	return nil
}

// Resealed counts what ResealSecrets rewrote.
type Resealed struct {
	Endpoints          int64
	IdempotencyRecords int64
}

// ResealSecrets rewrites every endpoint secret and stored response that is
// not sealed with the current key (stored in clear before encryption was
// turned on, or sealed with an older key) so that it is, a batch of rows
// per transaction. After it, keys other than the first can be dropped from
// WEBHOOKD_ENCRYPTION_KEY. Without a key it fails.
func (db *DB) ResealSecrets(ctx context.Context, batch int) (Resealed, error) {
	var n Resealed
	if db.box == nil {
		return n, errors.New("WEBHOOKD_ENCRYPTION_KEY is not set")
	}
	current := []byte(sealedPrefix + db.box.current + ":")
	stale := func(v []byte) bool { return v != nil && !bytes.HasPrefix(v, current) }
	reseal := func(v []byte) ([]byte, error) {
		plain, err := db.box.open(v)
		return db.box.seal(plain), err
	}
	after := ""
	for {
		var last string
		var changed int64
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, secret, previous_secret FROM endpoints WHERE id > $1
				ORDER BY id LIMIT $2 FOR UPDATE`, after, batch)
			if err != nil {
				return err
			}
			type row struct {
				id             string
				secret, before []byte
			}
			list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.id, &x.secret, &x.before)
				return x, err
			})
			if err != nil || len(list) == 0 {
				return err
			}
			last = list[len(list)-1].id
			for _, x := range list {
				if !stale(x.secret) && !stale(x.before) {
					continue
				}
				if x.secret, err = reseal(x.secret); err != nil {
					return fmt.Errorf("endpoint %s: %w", x.id, err)
				}
				if x.before, err = reseal(x.before); err != nil {
					return fmt.Errorf("endpoint %s: %w", x.id, err)
				}
				if _, err := tx.Exec(ctx, `UPDATE endpoints SET secret = $2, previous_secret = $3 WHERE id = $1`,
					x.id, string(x.secret), nullString(x.before)); err != nil {
					return err
				}
				changed++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("reseal endpoint secrets: %w", err)
		}
		n.Endpoints += changed
		if last == "" {
			break
		}
		after = last
	}
	afterProject, afterKey := "", ""
	for {
		var lastProject, lastKey string
		var changed int64
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT project_id, key, response_body FROM idempotency_records
				WHERE (project_id, key) > ($1, $2) ORDER BY project_id, key LIMIT $3 FOR UPDATE`, afterProject, afterKey, batch)
			if err != nil {
				return err
			}
			type row struct {
				project, key string
				body         []byte
			}
			list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.project, &x.key, &x.body)
				return x, err
			})
			if err != nil || len(list) == 0 {
				return err
			}
			lastProject, lastKey = list[len(list)-1].project, list[len(list)-1].key
			for _, x := range list {
				if !stale(x.body) {
					continue
				}
				body, err := reseal(x.body)
				if err != nil {
					return fmt.Errorf("idempotency record of project %s: %w", x.project, err)
				}
				if _, err := tx.Exec(ctx, `UPDATE idempotency_records SET response_body = $3 WHERE project_id = $1 AND key = $2`,
					x.project, x.key, body); err != nil {
					return err
				}
				changed++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("reseal stored responses: %w", err)
		}
		n.IdempotencyRecords += changed
		if lastProject == "" {
			return n, nil
		}
		afterProject, afterKey = lastProject, lastKey
	}
}

// nullString is v as text, or NULL for nil.
func nullString(v []byte) *string {
	if v == nil {
		return nil
	}
	s := string(v)
	return &s
}
