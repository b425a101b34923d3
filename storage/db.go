// Package storage keeps webhookd's state in PostgreSQL through pgx: projects
// and keys, endpoints, events, deliveries, attempts, dead letters,
// idempotency records and jobs. PostgreSQL is the source of truth; every
// multi-row change happens in one transaction.
package storage

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/webhookd/webhookd"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DB is the PostgreSQL store of one webhookd deployment.
type DB struct {
	pool *pgxpool.Pool
	// heart is the heartbeat's own pool of one connection (Beat): a beat
	// never waits for the shared pool, so a pool exhausted by a stall does
	// not stop the beats and get this process's live leases voided. A pool
	// rather than one pgx.Conn: it serializes the beats, and reconnects by
	// itself after a broken connection or a beat cut off by its timeout
	// (which closes the connection it ran on). It connects on the first
	// beat, so a process that does not beat opens no connection for it.
	heart *pgxpool.Pool
	box   *secretBox // nil: secrets stored as they are

	cache endpointCache // the endpoints event requests match, per project

	turns strandedTurns // leader turns this process could not give up (AsLeader)

	days dayRoutes // the day partition of an id (migration 25)
}

// Config tells Open where PostgreSQL is.
type Config struct {
	URL      string // required: postgres://...
	MaxConns int32  // pool size; default 20, keep it above the worker concurrency
	// SearchPath, when set, is the schema every connection works in (tests
	// give each test its own).
	SearchPath string
	// EncryptionKeys, when set, encrypts endpoint secrets and stored
	// responses at rest: "ID:BASE64KEY[,ID:BASE64KEY]...", 32-byte keys,
	// the first sealing new values (WEBHOOKD_ENCRYPTION_KEY).
	EncryptionKeys string
}

// Open connects a pool and checks that PostgreSQL answers.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	box, err := parseSecretBox(cfg.EncryptionKeys)
	if err != nil {
		return nil, fmt.Errorf("WEBHOOKD_ENCRYPTION_KEY: %w", err)
	}
	pc.MaxConns = 20
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "webhookd"
	if cfg.SearchPath != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = cfg.SearchPath
		pc.ConnConfig.RuntimeParams["application_name"] = "webhookd " + cfg.SearchPath
	}
	pc.ConnConfig.RuntimeParams["timezone"] = "UTC"
	hc := pc.Copy()
	hc.MaxConns, hc.MinConns = 1, 0
	hc.ConnConfig.RuntimeParams["application_name"] += " heartbeat"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	heart, err := pgxpool.NewWithConfig(ctx, hc)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect database: %w", err)
	}
	return &DB{pool: pool, heart: heart, box: box}, nil
}

// Pool returns the underlying pool (for tests and health checks).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Now is PostgreSQL's time: the one clock times compared between processes
// come from (SPEC §1).
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := db.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("database time: %w", err)
	}
	return now, nil
}

// Close closes the pools.
func (db *DB) Close() {
	db.pool.Close()
	db.heart.Close()
}

// Ping reports whether PostgreSQL answers.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// Migrate applies the embedded migrations. It is safe to run twice and from
// two processes at once: goose holds a PostgreSQL advisory lock meanwhile.
func (db *DB) Migrate(ctx context.Context) error {
	return db.withMigrations(ctx, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// CheckMigrated returns an error when migrations are pending, so a process
// refuses to start on a database `webhookd migrate` has not brought up to
// date.
func (db *DB) CheckMigrated(ctx context.Context) error {
	return db.withMigrations(ctx, func(p *goose.Provider) error {
		current, target, err := p.GetVersions(ctx)
		if err != nil {
			return err
		}
		if current < target {
			return fmt.Errorf("the database schema is at version %d, this webhookd needs %d: run `webhookd migrate` first", current, target)
		}
		return nil
	})
}

func (db *DB) withMigrations(ctx context.Context, fn func(*goose.Provider) error) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	// One lock per schema: two processes migrating one schema take turns,
	// while tests in schemas of their own do not wait on each other.
	var schema string
	if err := db.pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("migration schema: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lock.DefaultLockID^int64(h.Sum64()>>1)),
		lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(db.pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if err := fn(provider); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// querier is what a Store runs its SQL on: the pool, or a transaction.
type querier interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store runs the queries of webhookd on the pool or inside one transaction.
type Store struct {
	q querier
	// tx is set when the Store works inside a transaction whose caller
	// already decides on commit or rollback (WithIdempotency): multi-row
	// work then runs in it directly, without a savepoint of its own.
	tx  pgx.Tx
	db  *DB
	box *secretBox // seals endpoint secrets (DB.box)
}

// Store returns a Store working directly on the pool.
func (db *DB) Store() *Store { return &Store{q: db.pool, db: db, box: db.box} }

// inTx runs fn in a transaction: the Store's own one, or a new one.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if s.tx != nil {
		return fn(s.tx)
	}
	return pgx.BeginFunc(ctx, s.q, fn)
}

// Unique-constraint names recognised at the boundary.
const (
	constraintExternalID = "event_external_ids_key"
)

// translate maps database errors to application errors: no rows becomes
// ErrNotFound; everything else is wrapped as it is.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return &webhookd.Error{Code: webhookd.CodeNotFound, Message: what + " not found"}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) (code, constraint string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.ConstraintName
	}
	return "", ""
}

type pgxTx = pgx.Tx
