package webhookd

import (
	"errors"
	"fmt"
)

// Error codes of the public API (SPEC §2). The API maps each to its HTTP
// status in one place.
const (
	CodeUnauthorized             = "unauthorized"
	CodeNotFound                 = "not_found"
	CodeMethodNotAllowed         = "method_not_allowed" // 405: a known path, another method
	CodeInvalidJSON              = "invalid_json"
	CodeValidationFailed         = "validation_failed"
	CodeIdempotencyKeyRequired   = "idempotency_key_required"
	CodeIdempotencyKeyTooLong    = "idempotency_key_too_long"
	CodeIdempotencyKeyMismatch   = "idempotency_key_mismatch"
	CodeIdempotencyKeyInProgress = "idempotency_key_in_progress"
	CodeExternalIDTaken          = "external_id_taken"
	CodeVersionMismatch          = "version_mismatch"
	CodeEndpointDisabled         = "endpoint_disabled" // 409: a redelivery to a disabled endpoint
	CodePayloadTooLarge          = "payload_too_large"
	CodeRateLimited              = "rate_limited"
	CodeUnavailable              = "unavailable"
	CodeTimeout                  = "timeout" // 503: the API's bound on a request passed; the work may still commit
	CodeInternal                 = "internal"
)

// Error is the application error: a code from the list above and a message
// that is safe to show to the caller. Field names the offending input field
// for validation_failed; ExistingID carries the event id for
// external_id_taken.
type Error struct {
	Code       string
	Message    string
	Field      string
	ExistingID string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is lets errors.Is match on the code alone: errors.Is(err, ErrNotFound).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Field == ""
}

// Sentinel errors to compare with errors.Is.
var (
	ErrNotFound        = &Error{Code: CodeNotFound}
	ErrVersionMismatch = &Error{Code: CodeVersionMismatch}
	ErrExternalIDTaken = &Error{Code: CodeExternalIDTaken}
)

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a validation_failed error naming the field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeValidationFailed, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err's *Error, or CodeInternal.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
