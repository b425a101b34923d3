package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// apiClient talks to webhookd's public API with one project's key. It
// counts requests the API refused (any answer but 2xx, or no answer) so a
// scenario can report them; it never retries.
type apiClient struct {
	base    string
	key     string
	http    *http.Client
	refused atomic.Int64
}

// errRefused marks a request the API refused; the scenario goes on.
var errRefused = errors.New("refused by the API")

// eventIn is one event as posted.
type eventIn struct {
	Type        string         `json:"type"`
	Data        map[string]int `json:"data"`
	EndpointIDs []string       `json:"endpoint_ids,omitempty"` // none: every endpoint subscribed to Type
}

// endpointIn is the body of POST /v1/endpoints. MaxInFlight is left out
// when zero: webhookd may not know the field yet.
type endpointIn struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	MaxInFlight int      `json:"max_in_flight,omitempty"`
	Ordering    string   `json:"ordering,omitempty"`
	// Transformation: -transform's script (issue 36's cost); "": none.
	Transformation string `json:"transformation,omitempty"`
}

func newAPIClient(base, key string) *apiClient {
	return &apiClient{base: base, key: key, http: newLoopbackClient(2 * time.Minute)}
}

// CreateEndpoint creates an endpoint and returns its id. When maxInFlight
// is set and the API answers 400 about that field, it creates the endpoint
// without it and reports supported = false.
func (c *apiClient) CreateEndpoint(ctx context.Context, in endpointIn) (id string, supported bool, err error) {
	var out struct {
		ID string `json:"id"`
	}
	code, body, _, err := c.post(ctx, "/v1/endpoints", in, &out)
	if err == nil && code == http.StatusCreated {
		return out.ID, true, nil
	}
	if in.MaxInFlight != 0 && code == http.StatusBadRequest && strings.Contains(string(body), "max_in_flight") {
		in.MaxInFlight = 0
		id, _, err := c.CreateEndpoint(ctx, in)
		return id, false, err
	}
	if in.Ordering != "" && code == http.StatusBadRequest && strings.Contains(string(body), "ordering") {
		in.Ordering = ""
		id, _, err := c.CreateEndpoint(ctx, in)
		return id, false, err
	}
	if err == nil {
		err = fmt.Errorf("answered %d: %s", code, bytes.TrimSpace(body))
	}
	return "", false, fmt.Errorf("create endpoint %s: %w", in.URL, err)
}

// PostEvent posts one event and returns its id and when the 202 arrived.
func (c *apiClient) PostEvent(ctx context.Context, ev eventIn) (string, time.Time, error) {
	var out struct {
		ID string `json:"id"`
	}
	at, err := c.accept(ctx, "/v1/events", ev, &out)
	return out.ID, at, err
}

// PostBatch posts events as one batch and returns their ids, in order, and
// when the 202 arrived.
func (c *apiClient) PostBatch(ctx context.Context, evs []eventIn) ([]string, time.Time, error) {
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	at, err := c.accept(ctx, "/v1/events/batch", map[string]any{"events": evs}, &out)
	if err != nil {
		return nil, at, err
	}
	if len(out.Data) != len(evs) {
		return nil, at, fmt.Errorf("batch of %d answered with %d events", len(evs), len(out.Data))
	}
	ids := make([]string, len(out.Data))
	for i, d := range out.Data {
		ids[i] = d.ID
	}
	return ids, at, nil
}

// accept posts body to path, wants 202, and returns when the answer
// arrived. A refusal is counted and returned as errRefused.
func (c *apiClient) accept(ctx context.Context, path string, body, out any) (time.Time, error) {
	code, _, at, err := c.post(ctx, path, body, out)
	if ctx.Err() != nil {
		return at, ctx.Err()
	}
	if err != nil || code != http.StatusAccepted {
		c.refused.Add(1)
		return at, errRefused
	}
	return at, nil
}

// post sends body as JSON with a fresh Idempotency-Key and decodes a 2xx
// answer into out. It returns the status, the raw answer, and when the
// answer's headers arrived.
func (c *apiClient) post(ctx context.Context, path string, body, out any) (int, []byte, time.Time, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	at := time.Now()
	if err != nil {
		return 0, nil, at, err
	}
	defer resp.Body.Close()
	raw, err := readAll(resp)
	if err != nil || resp.StatusCode/100 != 2 {
		return resp.StatusCode, raw, at, err
	}
	return resp.StatusCode, raw, at, json.Unmarshal(raw, out)
}

// readAll reads a response body of at most 16 MiB.
func readAll(resp *http.Response) ([]byte, error) {
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}
