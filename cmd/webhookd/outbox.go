package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/api"
	"github.com/webhookd/webhookd/outbox"
)

// runOutboxInit is `outbox init`: the outbox tables in the service's
// database that --database-url names.
func runOutboxInit(ctx context.Context, inv *invocation) error {
	m := newMain(inv)
	defer m.Close()
	conn, err := pgx.Connect(ctx, inv.cfg.DatabaseURL)
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

// startOutbox starts the relay of WEBHOOKD_OUTBOX_SOURCES beside the
// worker, writing through the event write path (api.EventWriter).
func (m *Main) startOutbox(ctx context.Context) error {
	sources, err := outbox.ParseSources(m.Config.OutboxSources)
	if err != nil || len(sources) == 0 {
		return err
	}
	w := api.OutboxWriter{W: api.NewEventWriter(api.EventWriterConfig{DB: m.DB, Enqueuer: m.Queue,
		Logger: m.Logger, MaxPayloadBytes: m.Config.MaxPayloadBytes})}
	m.Outbox, err = outbox.New(outbox.Config{Sources: sources, Writer: w, Logger: m.Logger})
	if err != nil {
		return err
	}
	m.Outbox.Start(ctx)
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.String()
	}
	m.Logger.Info("outbox relay started", "sources", names)
	return nil
}
