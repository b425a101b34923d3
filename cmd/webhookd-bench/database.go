package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchDatabase is a PostgreSQL database made for one scenario run and
// dropped after it.
type benchDatabase struct {
	Name     string
	URL      string // the database's own URL, for webhookd
	adminURL string
	keep     bool // not ours to drop (-history-database)
}

// existingDatabase is the database name on the server at adminURL, used as
// it is and never dropped.
func existingDatabase(adminURL, name string) (*benchDatabase, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	u.Path = "/" + name
	return &benchDatabase{Name: name, URL: u.String(), adminURL: adminURL, keep: true}, nil
}

// createDatabase makes webhookd_bench_<pid>_<n> on the server at adminURL.
func createDatabase(ctx context.Context, adminURL, name string) (*benchDatabase, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	u.Path = "/" + name
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// name is ours (webhookd_bench_<pid>_<n>), so it needs no quoting.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &benchDatabase{Name: name, URL: u.String(), adminURL: adminURL}, nil
}

// Drop removes the database, closing whatever connections are left.
func (d *benchDatabase) Drop() error {
	if d.keep {
		return nil
	}
	if os.Getenv("WEBHOOKD_BENCH_KEEP_DATABASES") != "" {
		fmt.Fprintf(os.Stderr, "webhookd-bench: kept database %s (WEBHOOKD_BENCH_KEEP_DATABASES)\n", d.Name)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.adminURL)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// retireBenchProject renames an earlier run's project "bench" in a kept
// database (-history-database), so that this run's "keys create" makes a
// new one: else the run's events would go to the earlier runs' endpoints
// too, whose receivers are gone, and every run would carry the retries of
// all before it.
func retireBenchProject(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `UPDATE projects SET name = 'bench-' || id WHERE name = 'bench'`); err != nil {
		return fmt.Errorf("retire the project bench of an earlier run: %w", err)
	}
	return nil
}

// postgresVersion is SELECT version() on the server at adminURL.
func postgresVersion(ctx context.Context, adminURL string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "SELECT version()").Scan(&v)
	return v, err
}
