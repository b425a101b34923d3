// Package client is the Go client of webhookd's public API (SPEC §2, §8).
//
// It makes the safe thing the default for a service that hands events to
// webhookd:
//
//   - Every mutating call sends an Idempotency-Key (a UUIDv4) made once per
//     logical operation and reused on each of its retries, so a retry after a
//     lost response never creates a second event. WithIdempotencyKey passes
//     the caller's own key instead.
//   - Network errors, timeouts, 429, 500, 502, 503 and 504 are retried with
//     exponential backoff, full jitter and a cap, waiting at least as long as
//     Retry-After says, within a bounded number of tries and the context's
//     deadline. Other 4xx answers are never retried. The final error carries
//     the last response.
//   - Pacing: when X-RateLimit-Remaining runs low, calls wait until
//     X-RateLimit-Reset instead of running into 429, shared by every
//     goroutine that uses one Client.
//
// Errors from the API are *Error values carrying the code, message, field,
// HTTP status and request id; errors.Is matches them against the sentinel
// values (ErrNotFound, ErrExternalIDTaken, ...) by code.
//
// The package depends on the standard library, github.com/google/uuid and
// webhookd's root package (the error codes) only.
package client
