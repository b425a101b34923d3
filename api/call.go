package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// call is one authenticated API request as a handler sees it.
type call struct {
	r         *http.Request
	ctx       context.Context
	requestID string
	project   webhookd.Project
	body      []byte
	store     *storage.Store // the pool, or the idempotency transaction
	header    http.Header    // response headers to add (ETag)
	// secret says the response carries a secret (an endpoint's signing
	// secret, a portal link's token): its Idempotency-Key record keeps it
	// sealed for the API key that asked (storage.StoredResponse.Secret).
	secret bool
	// afterCommit runs once the response is committed and not a replay
	// (enqueueing the deliveries it created).
	afterCommit func(context.Context)
}

// handlerFunc answers a call with a status and a value to encode as JSON, or
// an error.
type handlerFunc func(c *call) (int, any, error)

// handle registers pattern with request ids, auth and the rate limit in
// front of h.
func (s *Server) handle(pattern string, h func(http.ResponseWriter, *http.Request, *call)) {
	s.handleOn(s.mux, pattern, h)
}

// handleOn is handle on mux.
func (s *Server) handleOn(mux *http.ServeMux, pattern string, h func(http.ResponseWriter, *http.Request, *call)) {
	s.patterns = append(s.patterns, pattern)
	wildcards := pathWildcards(pattern)
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c := &call{r: r, ctx: r.Context(), requestID: requestIDOf(r), header: http.Header{}}
		w.Header().Set("X-Request-Id", c.requestID)
		project, authErr, limited := s.authenticate(w, c)
		if limited {
			return
		}
		if authErr == nil {
			c.project = project
			res := s.limiter.allow(r.Context(), "prj:"+project.ID, project.RateLimitPerMinute, s.clock.Now())
			if !s.admit(w, c, res) {
				return
			}
		}
		if authErr != nil {
			s.fail(w, c, authErr)
			return
		}
		if err := checkRequest(r, wildcards); err != nil {
			s.fail(w, c, err)
			return
		}
		h(w, r, c)
	})
}

// authenticate resolves the Bearer key to its project. A key the cache
// does not know, or knows to be bad, is first charged to the client's
// address, so a flood of bad keys costs no PostgreSQL query once that
// address is over its limit; limited is true when the answer (429) is
// written already.
func (s *Server) authenticate(w http.ResponseWriter, c *call) (p webhookd.Project, err error, limited bool) {
	unauthorized := &webhookd.Error{Code: webhookd.CodeUnauthorized, Message: "missing or invalid API key; send Authorization: Bearer <key>"}
	byAddress := func() bool {
		return !s.admit(w, c, s.limiter.allow(c.ctx, "ip:"+s.clientIP(c.r), s.cfg.UnauthenticatedRateLimit, s.clock.Now()))
	}
	token, ok := bearerToken(c.r)
	if !ok {
		return p, unauthorized, byAddress()
	}
	hash := keyHash(token)
	if e, ok := s.keys.get(hash, time.Now()); ok {
		if !e.found {
			return p, unauthorized, byAddress()
		}
		return e.project, nil, false
	}
	if byAddress() {
		return p, nil, true
	}
	p, found, err := s.lookupKey(c.ctx, token)
	if err == nil && !found {
		err = unauthorized
	}
	return p, err, false
}

// admit writes the rate-limit headers of res and, when it refuses, the
// 429; it reports whether the request may go on.
func (s *Server) admit(w http.ResponseWriter, c *call, res rateResult) bool {
	res.setHeaders(w.Header())
	if res.allowed {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(res.retryAfterSeconds()))
	s.fail(w, c, &webhookd.Error{Code: webhookd.CodeRateLimited, Message: "rate limit exceeded; retry after the time in Retry-After"})
	return false
}

// fail writes err as an error response, logging it when it is internal.
func (s *Server) fail(w http.ResponseWriter, c *call, err error) {
	ae := appError(err)
	if ae.Code == webhookd.CodeInternal || ae.Code == webhookd.CodeUnavailable {
		s.log.ErrorContext(c.ctx, "api request failed", "request_id", c.requestID, "method", c.r.Method,
			"path", c.r.URL.Path, "err", err)
	}
	status, body := errorResponse(ae, c.requestID)
	writeBody(w, status, body)
}

// render turns a handler's answer into status and body bytes.
func (s *Server) render(c *call, h handlerFunc) (int, []byte, error) {
	status, v, err := h(c)
	if err != nil {
		ae := appError(err)
		if ae.Code == webhookd.CodeInternal || ae.Code == webhookd.CodeUnavailable {
			return 0, nil, err
		}
		st, body := errorResponse(ae, c.requestID)
		return st, body, nil
	}
	if v == nil {
		return status, nil, nil
	}
	body, err := marshalJSON(v)
	return status, body, err
}

// plain serves a handler that reads no body.
func (s *Server) plain(h handlerFunc) func(http.ResponseWriter, *http.Request, *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		c.store = s.db.Store()
		s.finish(w, c, h)
	}
}

// withBody serves a handler that reads a body of at most limit bytes, with
// no Idempotency-Key (PATCH is safe to repeat).
func (s *Server) withBody(limit int64, h handlerFunc) func(http.ResponseWriter, *http.Request, *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		var err error
		if c.body, err = readBody(w, r, limit); err != nil {
			s.fail(w, c, err)
			return
		}
		c.store = s.db.Store()
		s.finish(w, c, h)
	}
}

func (s *Server) finish(w http.ResponseWriter, c *call, h handlerFunc) {
	status, body, err := s.render(c, h)
	if err != nil {
		s.fail(w, c, err)
		return
	}
	for k, v := range c.header {
		w.Header()[k] = v
	}
	if body == nil {
		w.WriteHeader(status)
		return
	}
	writeBody(w, status, body)
	if c.afterCommit != nil && status < 300 {
		http.NewResponseController(w).Flush() // the client need not wait for the queue
		c.afterCommit(context.WithoutCancel(c.ctx))
	}
}

// idempotent serves a mutating handler behind an Idempotency-Key (SPEC §2).
func (s *Server) idempotent(limit int64, h handlerFunc) func(http.ResponseWriter, *http.Request, *call) {
	return func(w http.ResponseWriter, r *http.Request, c *call) {
		if ik, ok := s.idempotencyKey(w, c, limit); ok {
			s.runIdempotent(w, c, ik, h)
		}
	}
}

// idempotencyKey checks the Idempotency-Key and reads the body; when it
// refuses, the answer is written already.
func (s *Server) idempotencyKey(w http.ResponseWriter, c *call, limit int64) (storage.IdempotencyKey, bool) {
	key, ok := s.checkIdempotencyKey(w, c)
	if !ok {
		return storage.IdempotencyKey{}, false
	}
	var err error
	if c.body, err = readBody(w, c.r, limit); err != nil {
		s.fail(w, c, err)
		return storage.IdempotencyKey{}, false
	}
	credential, _ := bearerToken(c.r) // authenticated already
	return storage.IdempotencyKey{ProjectID: c.project.ID, Key: key, TTL: c.project.IdempotencyTTL,
		Fingerprint: fingerprint(c.r.Method, c.r.URL.Path, c.body), Credential: credential}, true
}

// checkIdempotencyKey returns the request's Idempotency-Key; when it is
// missing or bad, the refusal is written already.
func (s *Server) checkIdempotencyKey(w http.ResponseWriter, c *call) (string, bool) {
	key := c.r.Header.Get("Idempotency-Key")
	switch {
	case key == "":
		s.fail(w, c, &webhookd.Error{Code: webhookd.CodeIdempotencyKeyRequired, Message: "this route requires an Idempotency-Key header"})
		return "", false
	case len(key) > 255:
		s.fail(w, c, &webhookd.Error{Code: webhookd.CodeIdempotencyKeyTooLong, Message: "Idempotency-Key is longer than 255 characters"})
		return "", false
	}
	if err := checkText("Idempotency-Key", key); err != nil {
		s.fail(w, c, err)
		return "", false
	}
	return key, true
}

// runIdempotent runs h at most once for ik (storage.WithIdempotency) and
// writes its answer.
func (s *Server) runIdempotent(w http.ResponseWriter, c *call, ik storage.IdempotencyKey, h handlerFunc) {
	resp, replayed, err := s.db.WithIdempotency(c.ctx, ik, s.clock.Now(), s.cfg.IdempotencyWait,
		func(st *storage.Store) (storage.StoredResponse, error) {
			c.store = st
			status, body, err := s.render(c, h)
			return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: body, Secret: c.secret}, err
		})
	if err != nil {
		s.failIdempotent(w, c, err)
		return
	}
	s.writeStored(w, c, resp, replayed)
}

func (s *Server) failIdempotent(w http.ResponseWriter, c *call, err error) {
	if webhookd.ErrorCode(err) == webhookd.CodeIdempotencyKeyInProgress {
		w.Header().Set("Retry-After", "5")
	}
	s.fail(w, c, err)
}

// writeStored writes an idempotent request's response, then, for a new
// success, runs its afterCommit.
func (s *Server) writeStored(w http.ResponseWriter, c *call, resp storage.StoredResponse, replayed bool) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if resp.ContentType != "" {
		w.Header().Set("Content-Type", resp.ContentType)
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(resp.Body)
	if !replayed && c.afterCommit != nil && resp.StatusCode < 300 {
		http.NewResponseController(w).Flush() // the client need not wait for the queue
		c.afterCommit(context.WithoutCancel(c.ctx))
	}
}

// fingerprint is SHA-256 over method, path and body.
func fingerprint(method, path string, body []byte) [32]byte {
	h := sha256.New()
	io.WriteString(h, method+" "+path+"\n")
	h.Write(body)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// readBody reads at most limit bytes; a longer body is payload_too_large,
// refused before any parsing (and before reading it when Content-Length
// already tells).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	tooLarge := &webhookd.Error{Code: webhookd.CodePayloadTooLarge,
		Message: "request body is larger than " + strconv.FormatInt(limit, 10) + " bytes"}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, &webhookd.Error{Code: webhookd.CodeInvalidJSON, Message: "could not read the request body"}
	}
	return body, nil
}

// clientIP is the address a request came from: the peer's, or, when the
// peer is a proxy listed in Config.TrustedProxies, the nearest address in
// X-Forwarded-For that is not such a proxy.
func (s *Server) clientIP(r *http.Request) string {
	addr, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	ip := addr.Addr().Unmap()
	if !s.trusted(ip) {
		return ip.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		list := strings.Split(hops[i], ",")
		for j := len(list) - 1; j >= 0; j-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(list[j]))
			if err != nil {
				return ip.String() // a malformed chain is not followed past this proxy
			}
			if ip = hop.Unmap(); !s.trusted(ip) {
				return ip.String()
			}
		}
	}
	return ip.String()
}

func (s *Server) trusted(ip netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
