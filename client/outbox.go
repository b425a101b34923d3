package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// OutboxEvent is one row of the outbox table webhookd_outbox (contract
// version 1; README, "Outbox"): an event that webhookd's workers move out
// of your database once the transaction that inserted it commits.
type OutboxEvent struct {
	Type string // required: 1–128 of [A-Za-z0-9._:-]
	// Data is the event's data: a json.RawMessage or []byte is taken as
	// JSON as it is, anything else is marshaled with encoding/json.
	Data        any
	ExternalID  string   // optional ("": none); unique per project in webhookd
	EndpointIDs []string // optional (nil: every subscribed endpoint)
}

// OutboxInsert is the statement Outbox runs, and the one to run from any
// other language: $1 type, $2 data (JSON text), $3 external_id or NULL,
// $4 endpoint_ids as a PostgreSQL array literal ('{ep_1,ep_2}') or NULL.
const OutboxInsert = `INSERT INTO webhookd_outbox (type, data, external_id, endpoint_ids) VALUES ($1, $2::jsonb, $3, $4::text[])`

// Outbox inserts ev into webhookd_outbox in tx, your own transaction: the
// event exists exactly when tx commits, and a rollback leaves nothing.
// tx is a pgx.Tx (or anything with pgx's Exec(ctx, sql, args...): a
// pgx.Conn, a pgxpool.Pool outside a transaction) or a *sql.Tx (or
// anything with database/sql's ExecContext, whatever the driver). The
// arguments are text, so every PostgreSQL driver takes them. Create the
// table once with `webhookd outbox init --database-url URL`.
func Outbox(ctx context.Context, tx any, ev OutboxEvent) error {
	if ev.Type == "" {
		return errors.New("outbox: Type is required")
	}
	var data []byte
	switch d := ev.Data.(type) {
	case json.RawMessage:
		data = d
	case []byte:
		data = d
	default:
		var err error
		if data, err = json.Marshal(d); err != nil {
			return fmt.Errorf("outbox: data: %w", err)
		}
	}
	if !json.Valid(data) {
		return errors.New("outbox: data is not JSON")
	}
	args := []any{ev.Type, string(data), nil, nil}
	if ev.ExternalID != "" {
		args[2] = ev.ExternalID
	}
	if ev.EndpointIDs != nil {
		args[3] = arrayLiteral(ev.EndpointIDs)
	}
	switch t := tx.(type) {
	case interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}:
		_, err := t.ExecContext(ctx, OutboxInsert, args...)
		return wrapOutbox(err)
	default:
		return wrapOutbox(execPgx(ctx, tx, args))
	}
}

// execPgx runs OutboxInsert through tx's Exec(ctx, sql, args...) method,
// the shape of pgx's, found by reflection so that this package needs no
// pgx import.
func execPgx(ctx context.Context, tx any, args []any) error {
	v := reflect.ValueOf(tx)
	m := v.MethodByName("Exec")
	ctxType, anys := reflect.TypeFor[context.Context](), reflect.TypeFor[[]any]()
	if !m.IsValid() || m.Type().NumIn() != 3 || m.Type().In(0) != ctxType || m.Type().In(1).Kind() != reflect.String ||
		m.Type().In(2) != anys || !m.Type().IsVariadic() || m.Type().NumOut() != 2 ||
		m.Type().Out(1) != reflect.TypeFor[error]() {
		return fmt.Errorf("%T is neither a pgx.Tx nor a *sql.Tx (no Exec(ctx, sql, args...) or ExecContext)", tx)
	}
	out := m.CallSlice([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(OutboxInsert), reflect.ValueOf(args)})
	err, _ := out[1].Interface().(error)
	return err
}

func wrapOutbox(err error) error {
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// arrayLiteral writes ids as a PostgreSQL text[] literal.
func arrayLiteral(ids []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(id))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}
