package client_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib" // any database/sql driver for PostgreSQL does

	"github.com/webhookd/webhookd/client"
)

// Make an event part of your own transaction: the row in webhookd_outbox
// (made once by `webhookd outbox init`) commits with the order, or rolls
// back with it, and webhookd's workers (WEBHOOKD_OUTBOX_SOURCES) move it
// out. shopURL stands for your service's database.
func ExampleOutbox() {
	db, err := sql.Open("pgx", shopURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id text, total int)`); err != nil {
		log.Fatal(err)
	}
	order := struct {
		ID    string `json:"id"`
		Total int    `json:"total"`
	}{"o-1001", 100}

	tx, err := db.BeginTx(ctx, nil) // with pgx: pool.Begin(ctx); client.Outbox takes that pgx.Tx too
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, order.ID, order.Total); err != nil {
		log.Fatal(err)
	}
	err = client.Outbox(ctx, tx, client.OutboxEvent{Type: "order.created", Data: order,
		ExternalID: "order-" + order.ID + "-created"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil { // the event exists now, and only now
		log.Fatal(err)
	}

	var typ, data string
	if err := db.QueryRowContext(ctx, `SELECT type, data::text FROM webhookd_outbox ORDER BY id DESC LIMIT 1`).Scan(&typ, &data); err != nil {
		log.Fatal(err)
	}
	fmt.Println(typ, data)
	// Output: order.created {"id": "o-1001", "total": 100}
}
