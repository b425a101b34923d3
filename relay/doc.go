// Package relay carries the deliveries of relay endpoints (relay://NAME,
// SPEC §3 "Relay endpoints") to `webhookd listen`, which runs where webhookd
// cannot reach, such as a developer's laptop.
//
// The listener opens a WebSocket to the API (GET /v1/relays/{name}/stream,
// with the project's API key) and keeps it open; the worker that makes an
// attempt sends the same signed request it would send to an HTTP endpoint,
// through Hub.RoundTrip (wire.HTTPConfig.Relay); the listener forwards it
// to its local receiver and sends the answer back, which the worker records
// and classifies as any attempt's.
//
// The API process that holds a stream and the worker that makes an attempt
// may be different processes: Redis carries requests and answers between
// them (a list per relay, which the relay's listeners share, and a list
// per request for its answer), and says which relays have a listener (a
// key each stream refreshes). Redis is only a carrier here: when it loses
// a request or an answer, the attempt fails like a network error and is
// retried on the schedule; when it loses a relay's presence, the relay's
// deliveries wait until the stream's next heartbeat sets it again and wakes
// them. PostgreSQL stays the one schedule.
package relay
