package dashboard

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// localTransport is an http.RoundTripper that hands each request to h in
// this process, as it would arrive over the network: the request is
// written out in HTTP/1.1 (with the Host, Content-Length and
// Accept-Encoding lines Go's transport sends) and read back the way a
// server reads it. So the inspector's bin sees what a receiver would see,
// while nothing is dialled: no address for the SSRF guard to refuse.
type localTransport struct {
	h          http.Handler
	remoteAddr string // what the handler sees as the client's address
}

func (t localTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	if out.Header.Get("Accept-Encoding") == "" {
		out.Header.Set("Accept-Encoding", "gzip") // as http.Transport adds it
	}
	var wire bytes.Buffer
	if err := out.Write(&wire); err != nil {
		return nil, fmt.Errorf("inspector: write request: %w", err)
	}
	in, err := http.ReadRequest(bufio.NewReader(&wire))
	if err != nil {
		return nil, fmt.Errorf("inspector: read request: %w", err)
	}
	in = in.WithContext(req.Context())
	in.RemoteAddr = t.remoteAddr
	rec := &responseRecorder{header: http.Header{}}
	t.h.ServeHTTP(rec, in)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", rec.code, http.StatusText(rec.code)), StatusCode: rec.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: rec.header,
		Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), ContentLength: int64(rec.body.Len()), Request: req}, nil
}

// responseRecorder keeps what a handler answers.
type responseRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *responseRecorder) Header() http.Header { return r.header }

func (r *responseRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *responseRecorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
