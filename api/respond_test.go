package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
)

func TestAppErrorMapsOutagesToUnavailable(t *testing.T) {
	cases := []struct {
		err    error
		status int
	}{
		{fmt.Errorf("create events: %w", &pgconn.PgError{Code: "57P01"}), http.StatusServiceUnavailable}, // admin shutdown
		{&pgconn.PgError{Code: "08006"}, http.StatusServiceUnavailable},                                  // connection failure
		{fmt.Errorf("x: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		// A connection cut mid-query (the chaos soak's reset_peer and
		// immediate restarts): pgx reports an unexpected EOF.
		{fmt.Errorf("ingest: %w", io.ErrUnexpectedEOF), http.StatusServiceUnavailable},
		{fmt.Errorf("api key: %w", fmt.Errorf("read: %w", io.EOF)), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", net.ErrClosed), http.StatusServiceUnavailable},
		// A transaction begun on a connection pgx closed after a cut (the
		// soak's bulk upload during a PostgreSQL restart answered 500).
		{fmt.Errorf("bulk upload: begin: %w", pgconn.ErrConnClosed), http.StatusServiceUnavailable},
		{&pgconn.PgError{Code: "23505"}, http.StatusInternalServerError},
		{errors.New("boom"), http.StatusInternalServerError},
		{webhookd.Invalid("type", "bad"), http.StatusBadRequest},
		{fmt.Errorf("wrapped: %w", &webhookd.Error{Code: webhookd.CodeVersionMismatch}), http.StatusPreconditionFailed},
	}
	for _, c := range cases {
		if got := statusOf(appError(c.err).Code); got != c.status {
			t.Errorf("%v: %d, want %d", c.err, got, c.status)
		}
	}
}
