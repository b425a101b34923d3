package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"sync"
	"time"
)

// portalCookie is the name of the portal session cookie.
const portalCookie = "webhookd_portal"

// portalSessions issues and checks portal sessions (SPEC §5b). A session
// is a signed token, not stored: expiry (8 bytes) + a random id (16
// bytes) + the project id, and HMAC-SHA256 of them under a key derived
// from the admin token with a label of its own. So it is good on every
// dashboard process sharing the token, can never pass for an operator
// session (nor one for another project), and it is the same value whether
// the browser keeps it as a cookie or, in a frame whose third-party
// cookies are blocked, the portal carries it in its paths.
type portalSessions struct {
	key []byte
	ttl time.Duration

	mu      sync.Mutex
	revoked map[[16]byte]time.Time // id → expiry
}

// portalSession is a checked session.
type portalSession struct {
	id        [16]byte
	projectID string
	expires   time.Time
	token     string
}

func newPortalSessions(adminToken string, ttl time.Duration) *portalSessions {
	mac := hmac.New(sha256.New, []byte(adminToken))
	mac.Write([]byte("webhookd portal session v1"))
	return &portalSessions{key: mac.Sum(nil), ttl: ttl, revoked: map[[16]byte]time.Time{}}
}

func (p *portalSessions) sign(payload []byte) []byte {
	mac := hmac.New(sha256.New, p.key)
	mac.Write(payload)
	return mac.Sum(nil)
}

// issue returns a new session token for the project.
func (p *portalSessions) issue(projectID string, now time.Time) portalSession {
	s := portalSession{projectID: projectID, expires: now.Add(p.ttl)}
	rand.Read(s.id[:])
	payload := make([]byte, 24, 24+len(projectID)+sha256.Size)
	binary.BigEndian.PutUint64(payload, uint64(s.expires.Unix()))
	copy(payload[8:], s.id[:])
	payload = append(payload, projectID...)
	s.token = base64.RawURLEncoding.EncodeToString(append(payload, p.sign(payload)...))
	return s
}

// check returns the session of token when its signature holds (compared
// in constant time), it has not expired and it was not logged out.
func (p *portalSessions) check(token string, now time.Time) (portalSession, bool) {
	var s portalSession
	if len(token) > 256 {
		return s, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 24+1+sha256.Size {
		return s, false
	}
	payload, mac := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(mac, p.sign(payload)) {
		return s, false
	}
	s.expires = time.Unix(int64(binary.BigEndian.Uint64(payload[:8])), 0)
	copy(s.id[:], payload[8:24])
	s.projectID, s.token = string(payload[24:]), token
	if !now.Before(s.expires) {
		return s, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, revoked := p.revoked[s.id]
	return s, !revoked
}

// revoke ends a session in this process until it would have expired.
func (p *portalSessions) revoke(s portalSession, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.revoked {
		if !now.Before(e) {
			delete(p.revoked, k)
		}
	}
	p.revoked[s.id] = s.expires
}

// setCookie keeps the session in a cookie for the portal's paths, where
// the browser allows it: HttpOnly, SameSite=Lax (a link from the
// integrator's own app opens it), Secure over TLS. maxAge < 0 clears it.
func setPortalCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: portalCookie, Value: value, Path: "/portal/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
}
