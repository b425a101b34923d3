package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/webhookd/webhookd/api"
	"io"
	"text/tabwriter"
	"time"

	"github.com/webhookd/webhookd"
)

// refusedError is a command refused for a reason its message gives (no
// such key, say): main prints it and exits 1, where a usage or start-up
// error exits 2.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

const keysUsage = `usage: webhookd keys create --project NAME [--rate-limit N] [--idempotency-ttl D]
       webhookd keys list --project NAME
       webhookd keys revoke KEY_PREFIX|KEY_ID|KEY`

// runKeys runs `keys list` and `keys revoke` (args start with the
// subcommand).
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	sub := args[0]
	fs := flag.NewFlagSet("webhookd keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	check := cfg.bind(fs, getenv)
	project := new(string)
	if sub == "list" {
		project = fs.String("project", "", "the project whose keys to list")
	}
	var positional []string
	for rest := args[1:]; ; { // flags may come before or after KEY_PREFIX
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		positional, rest = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if err := check(); err != nil {
		return err
	}
	switch {
	case sub == "list" && (*project == "" || len(positional) > 0):
		return errors.New("keys list: --project NAME is required, and nothing else\n" + keysUsage)
	case sub == "revoke" && len(positional) != 1:
		return errors.New("keys revoke: give one KEY_PREFIX (as `webhookd keys list` shows it), key id or key\n" + keysUsage)
	}
	m := NewMain(cfg, stderr)
	defer m.Close()
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	if sub == "list" {
		keys, err := m.DB.Store().ListAPIKeys(ctx, *project)
		if err != nil {
			return refused("keys list", err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if k.RevokedAt != nil {
				revoked = k.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.CreatedAt.UTC().Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	}
	k, already, err := m.DB.Store().RevokeAPIKey(ctx, positional[0], time.Now())
	if err != nil {
		return refused("keys revoke", err)
	}
	if already {
		fmt.Fprintf(stdout, "%s (%s, project %s) was already revoked at %s\n", k.ID, k.Prefix, k.Project,
			k.RevokedAt.UTC().Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(stdout, "revoked %s (%s, project %s)\n", k.ID, k.Prefix, k.Project)
	// Every API process drops its cached keys on this announcement, so the
	// key gets 401 at once; without Redis it does within a second anyway.
	if err := m.OpenRedis(); err == nil {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := api.PublishKeyRevoked(actx, m.Redis, k.Prefix); err != nil {
			fmt.Fprintf(stderr, "webhookd: could not announce the revocation through Redis (%v); "+
				"API processes stop accepting the key within a second\n", err)
		}
	}
	return nil
}

// refused makes an application error (not_found, validation_failed) a
// refusal; other errors (PostgreSQL unreachable) stay as they are.
func refused(cmd string, err error) error {
	var ae *webhookd.Error
	if errors.As(err, &ae) {
		return refusedError{fmt.Errorf("%s: %s", cmd, ae.Message)}
	}
	return fmt.Errorf("%s: %w", cmd, err)
}
