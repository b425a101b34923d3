// Package dispatcher signs, sends and classifies webhook deliveries.
//
// It holds the pure pieces of the delivery path: the retry Schedule, the
// Retry-After parser, Standard Webhooks signing, the outcome table that turns
// one HTTP attempt into succeeded, retrying or dead letter (Classify), the
// SSRF guard checked at dial time, and the outbound HTTP client.
package dispatcher
