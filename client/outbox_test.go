package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
)

// sqlTx stands for a *sql.Tx, pgxTx for a pgx.Tx (with a result type of
// its own, as pgconn.CommandTag is): each records the statement it runs.
type sqlTx struct {
	sql  string
	args []any
}

func (t *sqlTx) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	t.sql, t.args = q, args
	return nil, nil
}

type commandTag struct{ s string }

type pgxTx struct {
	sql  string
	args []any
}

func (t *pgxTx) Exec(_ context.Context, q string, args ...any) (commandTag, error) {
	t.sql, t.args = q, args
	return commandTag{"INSERT 0 1"}, nil
}

func TestOutboxArguments(t *testing.T) {
	ctx := context.Background()
	s, p := &sqlTx{}, &pgxTx{}
	ev := OutboxEvent{Type: "order.created", Data: map[string]int{"id": 1}, ExternalID: "o-1",
		EndpointIDs: []string{"ep_1", `ep "2"`}}
	for _, tx := range []any{s, p} {
		if err := Outbox(ctx, tx, ev); err != nil {
			t.Fatalf("%T: %v", tx, err)
		}
	}
	want := []any{"order.created", `{"id":1}`, "o-1", `{"ep_1","ep \"2\""}`}
	for _, got := range [][]any{s.args, p.args} {
		if len(got) != len(want) {
			t.Fatalf("args %v", got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("arg %d = %v, want %v", i+1, got[i], want[i])
			}
		}
	}
	if s.sql != OutboxInsert || p.sql != OutboxInsert {
		t.Errorf("statements %q, %q", s.sql, p.sql)
	}
	// Optional columns left out are NULL; raw JSON goes as it is.
	if err := Outbox(ctx, p, OutboxEvent{Type: "a", Data: json.RawMessage(`[1, 2]`)}); err != nil {
		t.Fatal(err)
	}
	if p.args[1] != "[1, 2]" || p.args[2] != nil || p.args[3] != nil {
		t.Errorf("args %v", p.args)
	}
}

func TestOutboxRefuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		tx   any
		ev   OutboxEvent
		want string
	}{
		{&pgxTx{}, OutboxEvent{Data: 1}, "Type is required"},
		{&pgxTx{}, OutboxEvent{Type: "a", Data: json.RawMessage(`{`)}, "not JSON"},
		{&pgxTx{}, OutboxEvent{Type: "a", Data: func() {}}, "data:"},
		{"not a tx", OutboxEvent{Type: "a", Data: 1}, "neither a pgx.Tx nor a *sql.Tx"},
	} {
		if err := Outbox(ctx, tc.tx, tc.ev); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Outbox(%T, %+v) = %v, want %q", tc.tx, tc.ev, err, tc.want)
		}
	}
}
