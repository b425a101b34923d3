package dashboard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

const testToken = "test-admin-token-0123456789"

// manualCalls records what the dashboard hands the queue.
type manualCalls struct {
	mu    sync.Mutex
	calls [][3]string // request id, delivery id, by
	jobs  []string
}

// manual returns the redeliveries enqueued so far.
func (m *manualCalls) manual() [][3]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][3]string(nil), m.calls...)
}

// enqueuedJobs returns the jobs enqueued so far.
func (m *manualCalls) enqueuedJobs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.jobs...)
}

func (m *manualCalls) Enqueue(context.Context, ...webhookd.ScheduledDelivery) error { return nil }
func (m *manualCalls) EnqueueJob(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs = append(m.jobs, id)
	return nil
}
func (m *manualCalls) EnqueueManual(_ context.Context, requestID, deliveryID, by string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, [3]string{requestID, deliveryID, by})
	return nil
}

type fixture struct {
	t     *testing.T
	db    *storage.DB
	srv   *Server
	queue *manualCalls
	ts    *httptest.Server
}

func newFixture(t *testing.T, tweak func(*Config)) *fixture {
	t.Helper()
	db := testenv.DB(t)
	q := &manualCalls{}
	cfg := Config{DB: db, Enqueuer: q, AdminToken: testToken}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &fixture{t: t, db: db, srv: srv, queue: q, ts: ts}
}

// client returns an HTTP client that keeps cookies and does not follow
// redirects, so each answer can be checked.
func (f *fixture) client() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Jar: newJar()}
}

type jar struct {
	mu sync.Mutex
	c  map[string]*http.Cookie
}

func newJar() *jar { return &jar{c: map[string]*http.Cookie{}} }
func (j *jar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range cs {
		if c.MaxAge < 0 {
			delete(j.c, c.Name)
		} else {
			j.c[c.Name] = c
		}
	}
}
func (j *jar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*http.Cookie
	for _, c := range j.c {
		out = append(out, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	return out
}

func (f *fixture) do(c *http.Client, method, path string, form url.Values, hdr map[string]string) (*http.Response, string) {
	f.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, f.ts.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (f *fixture) login(c *http.Client) {
	f.t.Helper()
	resp, _ := f.do(c, "POST", "/login", url.Values{"token": {testToken}, "next": {"/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		f.t.Fatalf("login: %d", resp.StatusCode)
	}
}

// seed makes a project with an endpoint and n events, one delivery each,
// and returns the delivery ids, oldest first.
func (f *fixture) seed(project string, n int, eventType string) (endpointID string, ids []string) {
	f.t.Helper()
	ctx, s, now := context.Background(), f.db.Store(), time.Now().UTC()
	_, p, err := s.CreateAPIKey(ctx, project, storage.ProjectPlan{})
	if err != nil {
		f.t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, p.ID, storage.NewEndpoint{URL: "http://127.0.0.1:9/" + project,
		Secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}, now)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range n {
		evs, err := s.CreateEvents(ctx, p.ID, []storage.NewEvent{{Type: eventType,
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}}, now, func(int) string { return "" })
		if err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, evs[0].Deliveries[0].ID)
	}
	return ep.ID, ids
}

func TestLoginLogoutAndCookie(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	c := f.client()

	resp, _ := f.do(c, "GET", "/deliveries/dlv_x?a=1", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2Fdeliveries%2Fdlv_x%3Fa%3D1" {
		t.Fatalf("without login: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := f.do(c, "POST", "/login", url.Values{"token": {testToken + "x"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not the admin token") || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v", resp.StatusCode, resp.Cookies())
	}
	resp, _ = f.do(c, "POST", "/login", url.Values{"token": {testToken}, "next": {"//evil.example/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()[0]
	if ck.Name != sessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/" {
		t.Fatalf("session cookie %+v", ck)
	}
	old := ck.Value
	resp, body = f.do(c, "GET", "/", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "No deliveries yet") {
		t.Fatalf("after login: %d", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP %q", csp)
	}
	resp, _ = f.do(c, "GET", "/static/dashboard.css", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	f.do(c, "POST", "/logout", url.Values{}, nil)
	if resp, _ = f.do(c, "GET", "/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after logout: %d", resp.StatusCode)
	}
	// The cookie of the ended session is refused even if a browser kept it.
	stale := f.client()
	stale.Jar.SetCookies(nil, []*http.Cookie{{Name: sessionCookie, Value: old}})
	if resp, _ = f.do(stale, "GET", "/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoked cookie still logs in: %d", resp.StatusCode)
	}
	// A forged or tampered cookie is refused.
	forged := f.client()
	forged.Jar.SetCookies(nil, []*http.Cookie{{Name: sessionCookie, Value: old[:len(old)-2] + "AA"}})
	if resp, _ = f.do(forged, "GET", "/", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("tampered cookie logs in: %d", resp.StatusCode)
	}
}

func TestCookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	s := newSessions(testToken, time.Hour)
	r := httptest.NewRequest("POST", "https://dash.example/login", nil)
	r.TLS = &tls.ConnectionState{}
	w := httptest.NewRecorder()
	s.issue(w, r, time.Now())
	if ck := w.Result().Cookies()[0]; !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie over TLS: %+v", ck)
	}
}

func TestFailedLoginsAreRateLimited(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: now}
	f := newFixture(t, func(c *Config) { c.Clock, c.FailedLoginBurst, c.FailedLoginEvery = clock, 3, 10*time.Second })
	c := f.client()
	for i := range 3 {
		if resp, _ := f.do(c, "POST", "/login", url.Values{"token": {"guess-" + fmt.Sprint(i)}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i, resp.StatusCode)
		}
	}
	// Out of tries: even the right token is not looked at.
	resp, body := f.do(c, "POST", "/login", url.Values{"token": {testToken}}, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "10" ||
		!strings.Contains(body, "Too many failed logins") || len(resp.Cookies()) != 0 {
		t.Fatalf("over the limit: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clock.add(10 * time.Second)
	if resp, _ = f.do(c, "POST", "/login", url.Values{"token": {testToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after waiting: %d", resp.StatusCode)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestDeliveriesFiltersAndKeysetPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.PageSize = 2 })
	_, acme := f.seed("acme", 3, "invoice.paid")
	epGlobex, globex := f.seed("globex", 2, "user.created")
	c := f.client()
	f.login(c)

	ids := func(body string) []string {
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		doc.Find("tbody tr").Each(func(_ int, s *goquery.Selection) { out = append(out, s.AttrOr("data-delivery-id", "")) })
		return out
	}
	next := func(body string) string {
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
		return doc.Find("#next").AttrOr("href", "")
	}
	// All five, newest first, two a page, no repeats.
	var seen []string
	for path := "/"; path != ""; {
		resp, body := f.do(c, "GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		seen = append(seen, ids(body)...)
		path = next(body)
	}
	want := []string{globex[1], globex[0], acme[2], acme[1], acme[0]}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages gave %v, want %v", seen, want)
	}
	for q, want := range map[string][]string{
		"event_type=user.created":             {globex[1], globex[0]},
		"endpoint=" + epGlobex:                {globex[1], globex[0]},
		"delivery_id=" + acme[1]:              {acme[1]},
		"status=pending&event_type=nope":      nil,
		"status=succeeded":                    nil,
		"status=pending&endpoint=" + epGlobex: {globex[1], globex[0]},
	} {
		_, body := f.do(c, "GET", "/?"+q, nil, nil)
		if got := ids(body); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("?%s: %v, want %v", q, got, want)
		}
	}
	// Filters by project and event id, from the rows themselves.
	d, err := f.db.Store().DashboardDelivery(context.Background(), acme[0])
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][]string{"project=" + d.ProjectID + "&cursor=" + acme[2]: {acme[1], acme[0]},
		"event_id=" + d.EventID: {acme[0]}} {
		_, body := f.do(c, "GET", "/?"+q, nil, nil)
		if got := ids(body); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("?%s: %v, want %v", q, got, want)
		}
	}
	if resp, body := f.do(c, "GET", "/?status=bogus", nil, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Unknown status") {
		t.Errorf("bad status: %d", resp.StatusCode)
	}
}

func TestRedeliverRecordsEnqueuesAndRefusesCrossOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ep, ids := f.seed("acme", 1, "invoice.paid")
	c := f.client()
	f.login(c)
	pending := func() *string {
		d, err := f.db.Store().DashboardDelivery(context.Background(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		return d.PendingRedelivery
	}

	// Posted from another origin (another port of the same host: same site,
	// so the SameSite=Strict cookie goes along): refused, nothing recorded.
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://127.0.0.1:1"}} {
		resp, body := f.do(c, "POST", "/deliveries/"+ids[0]+"/redeliver", url.Values{}, h)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Cross-origin request refused") {
			t.Fatalf("%v: %d", h, resp.StatusCode)
		}
	}
	if p := pending(); p != nil || len(f.queue.manual()) != 0 {
		t.Fatalf("a refused POST changed something: pending %v, enqueued %v", p, f.queue.manual())
	}
	// Logging in from another origin is refused too.
	if resp, _ := f.do(f.client(), "POST", "/login", url.Values{"token": {testToken}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site login: %d", resp.StatusCode)
	}

	resp, _ := f.do(c, "POST", "/deliveries/"+ids[0]+"/redeliver", url.Values{}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/deliveries/"+ids[0]+"?redelivery=requested" {
		t.Fatalf("redeliver: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	p := pending()
	if p == nil || len(f.queue.manual()) != 1 || f.queue.manual()[0] != [3]string{*p, ids[0], "dashboard"} {
		t.Fatalf("pending %v, enqueued %v", p, f.queue.manual())
	}
	_, body := f.do(c, "GET", resp.Header.Get("Location"), nil, nil)
	if !strings.Contains(body, "Redelivery requested") || !strings.Contains(body, *p) {
		t.Errorf("the delivery page does not say a redelivery is on its way")
	}

	// A disabled endpoint: the page says endpoint_disabled, nothing is enqueued.
	d, _ := f.db.Store().DashboardDelivery(context.Background(), ids[0])
	if _, err := f.db.Store().UpdateEndpoint(context.Background(), d.ProjectID, ep,
		storage.EndpointPatch{Status: ptr(webhookd.EndpointDisabled)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, _ = f.do(c, "POST", "/deliveries/"+ids[0]+"/redeliver", url.Values{}, nil)
	if resp.Header.Get("Location") != "/deliveries/"+ids[0]+"?redelivery=endpoint_disabled" || len(f.queue.manual()) != 1 {
		t.Fatalf("disabled endpoint: %q, %d enqueued", resp.Header.Get("Location"), len(f.queue.manual()))
	}
	_, body = f.do(c, "GET", resp.Header.Get("Location"), nil, nil)
	if !strings.Contains(body, "endpoint_disabled") {
		t.Errorf("endpoint_disabled not shown")
	}
	if resp, _ := f.do(c, "POST", "/deliveries/dlv_nope/redeliver", url.Values{}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown delivery: %d", resp.StatusCode)
	}
}
