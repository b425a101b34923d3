package main

import (
	"context"
	"errors"
	"fmt"
)

// runSecretsReseal runs `secrets reseal`: every endpoint secret and stored
// response not yet sealed with the first key of WEBHOOKD_ENCRYPTION_KEY is
// rewritten so that it is.
func runSecretsReseal(ctx context.Context, inv *invocation) error {
	if inv.cfg.EncryptionKey == "" {
		return errors.New("set WEBHOOKD_ENCRYPTION_KEY to the key to encrypt with")
	}
	m := newMain(inv)
	defer m.Close()
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	n, err := m.DB.ResealSecrets(ctx, 500)
	if err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "resealed %d endpoints and %d stored responses\n", n.Endpoints, n.IdempotencyRecords)
	return nil
}
