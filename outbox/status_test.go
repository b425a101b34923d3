package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestDescribeSaysWhyWithoutTheDriversWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{writeError{errors.New("pool closed")}, "writing the rows to webhookd failed"},
		{fmt.Errorf("begin: %w", context.DeadlineExceeded), "the source database did not answer in time"},
		{&pgconn.PgError{Code: "42P01", Message: `relation "webhookd_outbox" does not exist`},
			"webhookd_outbox is missing in the source database (webhookd outbox init)"},
		{&pgconn.PgError{Code: "28P01", Message: `password authentication failed for user "svc"`},
			"the source database refused the login"},
		{fmt.Errorf("x: %w", &pgconn.PgError{Code: "53300"}), "the source database answered SQLSTATE 53300"},
		{errors.New("conn reset by 10.0.0.7:5432"), "moving rows from the source database failed"},
	} {
		if got := describe(tc.err); got != tc.want {
			t.Errorf("describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestSourceNamesNumberAProjectsSeveralSources(t *testing.T) {
	t.Parallel()
	got := fmt.Sprint(sourceNames([]Source{{Project: "shop"}, {Project: "billing"}, {Project: "shop"}}))
	if got != "[shop#1 billing shop#2]" {
		t.Fatalf("sourceNames: %s", got)
	}
}
