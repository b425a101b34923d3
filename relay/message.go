package relay

import (
	"net/http"
	"time"
)

// Request is one attempt's request on its way to a listener: what the
// worker would have sent to an HTTP endpoint, signed headers and all.
type Request struct {
	ID     string      `json:"id"`
	Method string      `json:"method"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
	// Deadline is when the attempt stops waiting for the answer: a request
	// taken later is not forwarded.
	Deadline time.Time `json:"deadline"`
}

// Response is a listener's answer to Request ID: the local receiver's
// status, headers and body, or Error when it gave none (it could not be
// reached, it timed out, the listener went away).
type Response struct {
	ID     string      `json:"id"`
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	Error  string      `json:"error,omitempty"`
	// Timeout: the local receiver did not answer by the request's
	// deadline (the attempt records a response timeout).
	Timeout bool `json:"timeout,omitempty"`
}

// maxBody is the most of a local receiver's body a listener sends back
// (an attempt keeps the first 8 KiB).
const maxBody = 64 << 10

// maxMessage bounds a message on the stream: a request (an event's
// payload, base64) or an answer.
const maxMessage = 8 << 20
