package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// runSecrets runs `secrets reseal`: every endpoint secret and stored
// response not yet sealed with the first key of WEBHOOKD_ENCRYPTION_KEY is
// rewritten so that it is.
func runSecrets(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "reseal" {
		return errors.New("usage: webhookd secrets reseal")
	}
	fs := flag.NewFlagSet("webhookd secrets reseal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	check := cfg.bind(fs, getenv)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("usage: webhookd secrets reseal")
	}
	if cfg.EncryptionKey == "" {
		return errors.New("secrets reseal: set WEBHOOKD_ENCRYPTION_KEY to the key to encrypt with")
	}
	m := NewMain(cfg, stderr)
	defer m.Close()
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	n, err := m.DB.ResealSecrets(ctx, 500)
	if err != nil {
		return fmt.Errorf("secrets reseal: %w", err)
	}
	fmt.Fprintf(stdout, "resealed %d endpoints and %d stored responses\n", n.Endpoints, n.IdempotencyRecords)
	return nil
}
