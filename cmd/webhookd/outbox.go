package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/outbox"
)

// outboxInit is `outbox init --database-url URL`: the outbox tables in the
// service's database that --database-url names. The flag is its own, not
// the WEBHOOKD_DATABASE_URL setting: a forgotten flag must not make the
// outbox in webhookd's own database.
func outboxInit(f *flagSet) action {
	var url string
	f.String(&url, "database-url", "", secretURL, "the service's PostgreSQL `URL` (required)")
	return func(ctx context.Context, inv *invocation) error {
		if url == "" {
			return usageError{cmd: "outbox init", err: errors.New("--database-url is required: the service's database")}
		}
		m := newMain(inv)
		defer m.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return fmt.Errorf("--database-url: %w", err)
		}
		defer conn.Close(context.Background())
		if err := outbox.Init(ctx, conn); err != nil {
			return err
		}
		m.Logger.Info("outbox ready: INSERT INTO webhookd_outbox (type, data) in your transactions", "contract_version", outbox.Version)
		return nil
	}
}

// startOutbox starts the relay of WEBHOOKD_OUTBOX_SOURCES beside the
// worker, writing through the event write path (api.EventWriter).
func (m *Main) startOutbox(ctx context.Context) error {
	sources, err := outbox.ParseSources(m.Config.OutboxSources)
	if err != nil || len(sources) == 0 {
		return err
	}
	w := api.OutboxWriter{W: api.NewEventWriter(api.EventWriterConfig{DB: m.DB, Enqueuer: m.Queue,
		Logger: m.Logger, MaxPayloadBytes: m.Config.MaxPayloadBytes})}
	m.Outbox, err = outbox.New(outbox.Config{Sources: sources, Writer: w, Logger: m.Logger,
		Metrics: m.Registry})
	if err != nil {
		return err
	}
	m.Outbox.Start(ctx)
	if m.health != nil {
		m.health.outbox = m.Outbox.Status
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.String()
	}
	m.Logger.Info("outbox relay started", "sources", names)
	return nil
}
