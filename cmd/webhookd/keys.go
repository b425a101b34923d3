package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/storage"
)

// keysCreate is `keys create --project NAME`: the new key alone on stdout.
func keysCreate(f *flagSet) action {
	var (
		project string
		rate    int
		idemTTL time.Duration
	)
	f.String(&project, "project", "", plain, "the project's `NAME` (required); made if it is new")
	f.Int(&rate, "rate-limit", "", "API requests per minute for the project (`N`; default 6000)")
	f.Duration(&idemTTL, "idempotency-ttl", "", "how long Idempotency-Key records are kept, up to 72h (`D`; default 24h)")
	return func(ctx context.Context, inv *invocation) error {
		if project == "" {
			return usageError{cmd: "keys create", err: errors.New("--project is required")}
		}
		plan := storage.ProjectPlan{RateLimitPerMinute: rate, IdempotencyTTL: idemTTL}
		if err := plan.Validate(); err != nil {
			return flagUsage("keys create", err)
		}
		m := newMain(inv)
		defer m.Close()
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		key, _, err := m.DB.Store().CreateAPIKey(ctx, project, plan)
		if err != nil {
			return flagUsage("keys create", err)
		}
		fmt.Fprintln(inv.stdout, key)
		return nil
	}
}

// keysList is `keys list --project NAME`: the project's keys, one a line
// under a header.
func keysList(f *flagSet) action {
	var project string
	f.String(&project, "project", "", plain, "the project whose keys to list (`NAME`; required)")
	return func(ctx context.Context, inv *invocation) error {
		if project == "" {
			return usageError{cmd: "keys list", err: errors.New("--project NAME is required")}
		}
		m := newMain(inv)
		defer m.Close()
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		keys, err := m.DB.Store().ListAPIKeys(ctx, project)
		if err != nil {
			return refused(err)
		}
		tw := tabwriter.NewWriter(inv.stdout, 0, 4, 2, ' ', 0)
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
}

// keysRevoke is `keys revoke KEY_PREFIX`: the key gets 401 at once on
// every API process.
func keysRevoke(*flagSet) action {
	return func(ctx context.Context, inv *invocation) error {
		m := newMain(inv)
		defer m.Close()
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		k, already, err := m.DB.Store().RevokeAPIKey(ctx, inv.args[0], time.Now())
		if err != nil {
			return refused(err)
		}
		if already {
			fmt.Fprintf(inv.stdout, "%s (%s, project %s) was already revoked at %s\n", k.ID, k.Prefix, k.Project,
				k.RevokedAt.UTC().Format(time.RFC3339))
			return nil
		}
		fmt.Fprintf(inv.stdout, "revoked %s (%s, project %s)\n", k.ID, k.Prefix, k.Project)
		// Every API process drops its cached keys on this announcement, so the
		// key gets 401 at once; without Redis it does within a second anyway.
		if err := m.OpenRedis(); err == nil {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := api.PublishKeyRevoked(actx, m.Redis, k.Prefix); err != nil {
				fmt.Fprintf(inv.stderr, "webhookd: keys revoke: could not announce the revocation through Redis (%v); "+
					"API processes stop accepting the key within a second\n", err)
			}
		}
		return nil
	}
}

// flagUsage makes a validation error a usage error naming the flag
// (--rate-limit for rate_limit); other errors stay as they are.
func flagUsage(cmd string, err error) error {
	var ae *webhookd.Error
	if errors.As(err, &ae) && ae.Code == webhookd.CodeValidationFailed && ae.Field != "" {
		return usageError{cmd: cmd, err: fmt.Errorf("--%s: %s", strings.ReplaceAll(ae.Field, "_", "-"),
			strings.TrimPrefix(ae.Message, ae.Field+": "))}
	}
	return err
}

// refused makes an application error (not_found, validation_failed) a
// refusal that says only its message; other errors (PostgreSQL
// unreachable) stay as they are.
func refused(err error) error {
	var ae *webhookd.Error
	if errors.As(err, &ae) {
		return refusedError{errors.New(ae.Message)}
	}
	return err
}
