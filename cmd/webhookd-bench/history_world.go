package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
)

// historyWorld is what the generated history belongs to: projects, each
// with its endpoints.
type historyWorld struct {
	projects []historyProject
}

type historyProject struct {
	id        string
	endpoints []historyEndpoint
}

type historyEndpoint struct {
	id, url string
}

// historyEventTypes are the event types of the generated history.
var historyEventTypes = []string{"invoice.paid", "invoice.created", "order.created", "order.shipped",
	"customer.updated", "payment.failed", "subscription.renewed", "refund.issued"}

// makeHistoryWorld makes o.Projects projects named history-N (reused when
// they exist, so a second run adds to the first's) and o.Endpoints new
// endpoints spread over them, in one transaction.
func makeHistoryWorld(ctx context.Context, pool *pgxpool.Pool, o *historyOptions) (*historyWorld, error) {
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	entropy := &pcgReader{rng}
	now := time.Now().UTC()
	w := &historyWorld{projects: make([]historyProject, o.Projects)}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range w.projects {
			err := tx.QueryRow(ctx, `INSERT INTO projects (id, name) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id`,
				"prj_"+ulid.MustNew(ulid.Timestamp(now), entropy).String(), fmt.Sprintf("history-%d", i+1)).Scan(&w.projects[i].id)
			if err != nil {
				return fmt.Errorf("project: %w", err)
			}
		}
		rows := make([][]any, o.Endpoints)
		for i := range o.Endpoints {
			p := &w.projects[i%o.Projects]
			secret := make([]byte, 24)
			entropy.Read(secret)
			ep := historyEndpoint{id: "ep_" + ulid.MustNew(ulid.Timestamp(now), entropy).String(),
				url: fmt.Sprintf("https://hooks%d.example.com/webhooks/%d", i%17, i)}
			p.endpoints = append(p.endpoints, ep)
			rows[i] = []any{ep.id, p.id, ep.url, "history endpoint " + fmt.Sprint(i+1),
				"whsec_" + base64.StdEncoding.EncodeToString(secret), now.AddDate(0, -2, 0), now}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"endpoints"},
			[]string{"id", "project_id", "url", "description", "secret", "created_at", "updated_at"}, pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("endpoints: %w", err)
		}
		return nil
	})
	return w, err
}

// pcgReader is a ULID's entropy from a seeded generator, so a seed makes
// the same ids of the same times. Not for anything secret.
type pcgReader struct{ r *rand.Rand }

var _ io.Reader = (*pcgReader)(nil)

func (p *pcgReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(p.r.Uint32())
	}
	return len(b), nil
}

// payloadWords pad an event's data to its size, as a description would.
var payloadWords = strings.Fields(`the quick brown fox jumps over lazy dog invoice line item
	subscription renewal monthly annual plan upgrade downgrade customer account balance credit`)
