package client

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/webhookd/webhookd"
)

// Error is an answer of the API that was not a success: its HTTP status and
// the error body {"error":{"code","message","field","request_id",...}}.
// After retries it describes the last response, and Attempts says how many
// tries were made.
type Error struct {
	StatusCode int    // HTTP status, e.g. 404
	Code       string // the API's snake_case code, e.g. "not_found"
	Message    string // human text from the API
	Field      string // the offending field for validation_failed, e.g. "events[3].type"
	ExistingID string // the event that holds the external_id, for external_id_taken
	RequestID  string // X-Request-Id of the response; quote it when asking for help
	Header     http.Header
	Body       []byte // the raw response body
	Attempts   int    // tries made, the last of which got this answer
}

func (e *Error) Error() string {
	if e.StatusCode == 0 { // a sentinel
		return "webhookd: " + e.Code
	}
	s := fmt.Sprintf("webhookd: %d %s: %s", e.StatusCode, e.Code, e.Message)
	if e.Field != "" && e.Code == webhookd.CodeValidationFailed {
		s += " (field " + e.Field + ")"
	}
	if e.RequestID != "" {
		s += " [" + e.RequestID + "]"
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d tries", e.Attempts)
	}
	return s
}

// Is matches a sentinel (an *Error with only Code set) by code, so
// errors.Is(err, client.ErrNotFound) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.StatusCode == 0 && t.Message == "" && t.Code != "" && t.Code == e.Code
}

// Temporary reports whether the error is one a later try might not get
// (429, 5xx, an idempotency key still in progress).
func (e *Error) Temporary() bool {
	return retryableStatus(e.StatusCode) || e.Code == webhookd.CodeIdempotencyKeyInProgress
}

// Codes the API answers, named here for callers of this package.
const (
	CodeTimeout          = "timeout"                     // 503: the API's own request deadline passed
	CodeMethodNotAllowed = webhookd.CodeMethodNotAllowed // 405: a known path, another method
)

// Sentinel errors, one per API error code, to use with errors.Is.
var (
	ErrUnauthorized             = &Error{Code: webhookd.CodeUnauthorized}
	ErrNotFound                 = &Error{Code: webhookd.CodeNotFound}
	ErrInvalidJSON              = &Error{Code: webhookd.CodeInvalidJSON}
	ErrValidationFailed         = &Error{Code: webhookd.CodeValidationFailed}
	ErrIdempotencyKeyRequired   = &Error{Code: webhookd.CodeIdempotencyKeyRequired}
	ErrIdempotencyKeyTooLong    = &Error{Code: webhookd.CodeIdempotencyKeyTooLong}
	ErrIdempotencyKeyMismatch   = &Error{Code: webhookd.CodeIdempotencyKeyMismatch}
	ErrIdempotencyKeyInProgress = &Error{Code: webhookd.CodeIdempotencyKeyInProgress}
	ErrExternalIDTaken          = &Error{Code: webhookd.CodeExternalIDTaken}
	ErrVersionMismatch          = &Error{Code: webhookd.CodeVersionMismatch}
	ErrEndpointDisabled         = &Error{Code: webhookd.CodeEndpointDisabled}
	ErrPayloadTooLarge          = &Error{Code: webhookd.CodePayloadTooLarge}
	ErrRateLimited              = &Error{Code: webhookd.CodeRateLimited}
	ErrUnavailable              = &Error{Code: webhookd.CodeUnavailable}
	ErrTimeout                  = &Error{Code: CodeTimeout}
	ErrMethodNotAllowed         = &Error{Code: CodeMethodNotAllowed}
	ErrInternal                 = &Error{Code: webhookd.CodeInternal}
)

// errorFromResponse builds an *Error from a non-2xx answer. A body that is
// not the API's error shape (a proxy's page) gets a code from the status.
func errorFromResponse(resp *http.Response, body []byte, attempts int) *Error {
	e := &Error{StatusCode: resp.StatusCode, Header: resp.Header, Body: body, Attempts: attempts,
		RequestID: resp.Header.Get("X-Request-Id")}
	var wire struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			Field      string `json:"field"`
			RequestID  string `json:"request_id"`
			ExistingID string `json:"existing_id"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && wire.Error.Code != "" {
		e.Code, e.Message, e.Field, e.ExistingID = wire.Error.Code, wire.Error.Message, wire.Error.Field, wire.Error.ExistingID
		if wire.Error.RequestID != "" {
			e.RequestID = wire.Error.RequestID
		}
		return e
	}
	e.Code, e.Message = codeOfStatus(resp.StatusCode), http.StatusText(resp.StatusCode)
	return e
}

// codeOfStatus guesses a code for an answer without an error body.
func codeOfStatus(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return webhookd.CodeUnauthorized
	case http.StatusNotFound:
		return webhookd.CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return webhookd.CodePayloadTooLarge
	case http.StatusTooManyRequests:
		return webhookd.CodeRateLimited
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return webhookd.CodeUnavailable
	}
	if status >= 500 {
		return webhookd.CodeInternal
	}
	return "http_" + fmt.Sprint(status)
}
