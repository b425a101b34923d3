package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/webhookd/webhookd"
)

// statusOf maps an application error code to its HTTP status: the one place
// that does.
func statusOf(code string) int {
	switch code {
	case webhookd.CodeUnauthorized:
		return http.StatusUnauthorized
	case webhookd.CodeNotFound:
		return http.StatusNotFound
	case webhookd.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case webhookd.CodeInvalidJSON, webhookd.CodeValidationFailed,
		webhookd.CodeIdempotencyKeyRequired, webhookd.CodeIdempotencyKeyTooLong:
		return http.StatusBadRequest
	case webhookd.CodeIdempotencyKeyMismatch:
		return http.StatusUnprocessableEntity
	case webhookd.CodeIdempotencyKeyInProgress, webhookd.CodeExternalIDTaken, webhookd.CodeEndpointDisabled:
		return http.StatusConflict
	case webhookd.CodeVersionMismatch:
		return http.StatusPreconditionFailed
	case webhookd.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case webhookd.CodeRateLimited:
		return http.StatusTooManyRequests
	case webhookd.CodeUnavailable, webhookd.CodeTimeout:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// appError turns any error into an *webhookd.Error safe to show: database
// outages become unavailable, anything unknown internal.
func appError(err error) *webhookd.Error {
	var e *webhookd.Error
	if errors.As(err, &e) {
		return e
	}
	var (
		ce *pgconn.ConnectError
		ne net.Error
		pe *pgconn.PgError
	)
	// Connection exceptions (08) and operator intervention (57: shutdown,
	// restart) mean PostgreSQL is going or coming back; so does a
	// connection cut in the middle of a query (pgx reports the cut as an
	// unexpected EOF: a reset, a restart with immediate shutdown, a
	// network fault), or one already closed (by us or by pgx, after such
	// a cut).
	outage := errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57"))
	cut := errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgconn.ErrConnClosed)
	if outage || cut || errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return &webhookd.Error{Code: webhookd.CodeUnavailable, Message: "the service is temporarily unavailable; retry later"}
	}
	return &webhookd.Error{Code: webhookd.CodeInternal, Message: "internal error"}
}

// errorResponse renders err as the SPEC's error body.
func errorResponse(err *webhookd.Error, requestID string) (int, []byte) {
	body, _ := marshalJSON(errorJSON{Error: errorBodyJSON{Code: err.Code, Message: err.Message,
		RequestID: requestID, Field: err.Field, ExistingID: err.ExistingID}})
	return statusOf(err.Code), body
}

// marshalJSON encodes a response body without HTML escaping: a stored
// payload (json.RawMessage) goes out as the bytes stored, and text such as
// a response body as itself ("<b>", not "\u003cb\u003e"); the body is
// application/json, never HTML.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeBody writes a JSON response with the headers every error needs.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
