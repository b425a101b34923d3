package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// sessionCookie is the name of the login cookie.
const sessionCookie = "webhookd_session"

// sessions issues and checks login cookies. A cookie is signed, not stored:
// expiry (8 bytes) + a random id (16 bytes) + HMAC-SHA256 of both under a
// key derived from the admin token. So a cookie is good on every dashboard
// process that shares the token, and changing the token logs everyone out.
// A logout revokes its cookie's id in this process until the cookie would
// have expired anyway.
type sessions struct {
	key   []byte
	token [32]byte // SHA-256 of the admin token, compared in constant time
	ttl   time.Duration

	mu      sync.Mutex
	revoked map[[16]byte]time.Time // id → expiry
}

func newSessions(adminToken string, ttl time.Duration) *sessions {
	mac := hmac.New(sha256.New, []byte(adminToken))
	mac.Write([]byte("webhookd dashboard session v1"))
	return &sessions{key: mac.Sum(nil), token: sha256.Sum256([]byte(adminToken)), ttl: ttl,
		revoked: map[[16]byte]time.Time{}}
}

// tokenMatches compares a submitted token with the admin token in constant
// time (hashing both first, so not even the length leaks).
func (s *sessions) tokenMatches(submitted string) bool {
	h := sha256.Sum256([]byte(submitted))
	return subtle.ConstantTimeCompare(h[:], s.token[:]) == 1
}

func (s *sessions) sign(payload []byte) []byte {
	mac := hmac.New(sha256.New, s.key)
	mac.Write(payload)
	return mac.Sum(nil)
}

// issue sets a new session cookie on w: HttpOnly, SameSite=Strict, and
// Secure when the request came over TLS.
func (s *sessions) issue(w http.ResponseWriter, r *http.Request, now time.Time) {
	exp := now.Add(s.ttl)
	payload := make([]byte, 24)
	binary.BigEndian.PutUint64(payload, uint64(exp.Unix()))
	rand.Read(payload[8:])
	value := base64.RawURLEncoding.EncodeToString(append(payload, s.sign(payload)...))
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", Expires: exp,
		MaxAge: int(s.ttl.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// parse returns the id and expiry of r's session cookie when its signature
// holds and it has not expired.
func (s *sessions) parse(r *http.Request, now time.Time) (id [16]byte, exp time.Time, ok bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return id, exp, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(raw) != 24+sha256.Size {
		return id, exp, false
	}
	if !hmac.Equal(raw[24:], s.sign(raw[:24])) {
		return id, exp, false
	}
	exp = time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	copy(id[:], raw[8:24])
	return id, exp, now.Before(exp)
}

// valid reports whether r carries a live session.
func (s *sessions) valid(r *http.Request, now time.Time) bool {
	id, _, ok := s.parse(r, now)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, revoked := s.revoked[id]
	return !revoked
}

// revoke ends r's session, if any, and clears the cookie.
func (s *sessions) revoke(w http.ResponseWriter, r *http.Request, now time.Time) {
	if id, exp, ok := s.parse(r, now); ok {
		s.mu.Lock()
		for k, e := range s.revoked {
			if !now.Before(e) {
				delete(s.revoked, k)
			}
		}
		s.revoked[id] = exp
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// localPath returns next when it is a path on this site, else "/": the
// login page never redirects elsewhere.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return next
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
