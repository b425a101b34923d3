// Package outbox moves events out of a service's own database into
// webhookd: the transactional outbox of SPEC §2. A service INSERTs a row
// into webhookd_outbox (schema.sql, created by Init) in the transaction
// that makes its business change, so the event exists exactly when the
// change commits. A Relay, run beside each worker, moves the committed
// rows of every source through webhookd's event write path (a Writer),
// each under its own idempotency key, and deletes them from the source.
package outbox
