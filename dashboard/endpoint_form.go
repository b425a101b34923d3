package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	endpointfilter "github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/internal/netguard"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

// The forms that add and change endpoints, and the event-type catalog
// page: the portal's (and, for changing, the operator's) counterparts of
// POST and PATCH /v1/endpoints, with the same rules.

// catalogLimit caps the catalog entries a page shows.
const catalogLimit = 500

// maxFormEventTypes and maxFormDescription are the API's limits.
const (
	maxFormEventTypes  = 256
	maxFormDescription = 1024
)

var formEventType = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// endpointFormView is the endpoint form as shown: the values entered (or
// stored), the catalog to pick from, and what was wrong with a try.
type endpointFormView struct {
	URL         string
	Description string
	EventTypes  []string // ticked: of the catalog
	OtherTypes  string   // the rest, comma-separated
	Ordered     bool     // ordering fifo
	Filter      string   // its JSON text; "": none
	// Transformation is its JavaScript; "": none.
	Transformation string
	Catalog        []storage.EventTypeRow
	Error          string
}

type endpointPageView struct {
	E     webhookd.Endpoint
	Form  endpointFormView
	Saved bool
	// Preview is the pane that tries the form's filter and transformation
	// on an event.
	Preview previewView
	// Lifecycle is the endpoint's latest operational events, newest first.
	Lifecycle []storage.LifecycleEntry
	Now       time.Time
}

// lifecycleLimit is how many lifecycle entries an endpoint's page shows.
const lifecycleLimit = 20

// lifecycleText says what an operational event about an endpoint tells.
func lifecycleText(l storage.LifecycleEntry) string {
	var d struct {
		Failures       int        `json:"consecutive_failures"`
		NextProbeAt    *time.Time `json:"next_probe_at"`
		DisabledReason string     `json:"disabled_reason"`
	}
	json.Unmarshal(l.Data, &d) // our own events' data; a field it lacks stays zero
	switch l.Type {
	case webhookd.EventCircuitOpened:
		s := fmt.Sprintf("Circuit opened after %d consecutive failed attempts", d.Failures)
		if d.NextProbeAt != nil {
			s += "; first probe at " + utc(*d.NextProbeAt) + " UTC"
		}
		return s
	case webhookd.EventCircuitClosed:
		return "Circuit closed: an attempt succeeded, the waiting deliveries flow again"
	case webhookd.EventEndpointDisabled:
		if d.DisabledReason == webhookd.DisabledGone {
			return "Disabled: the endpoint answered 410 Gone"
		}
		return "Disabled: no successful attempt within the disable window"
	}
	return l.Type
}

type eventTypesView struct {
	Rows []storage.EventTypeRow
}

// ordering is the form's ordering, as the API names it.
func (f endpointFormView) ordering() string {
	if f.Ordered {
		return webhookd.OrderingFIFO
	}
	return webhookd.OrderingNone
}

func ptr[T any](v T) *T { return &v }

func ratePerSecond(r *int) string {
	if r == nil {
		return "none"
	}
	return strconv.Itoa(*r) + " per second"
}

// catalog returns the live event types of a project, for the checkboxes.
func (s *Server) catalog(ctx context.Context, projectID string) ([]storage.EventTypeRow, error) {
	return s.store.DashboardEventTypes(ctx, projectID, catalogLimit)
}

// formOf fills a form view with stored values: types of the catalog are
// ticked, the others listed as text.
func formOf(e webhookd.Endpoint, catalog []storage.EventTypeRow) endpointFormView {
	f := endpointFormView{URL: e.URL, Description: e.Description, Catalog: catalog, Ordered: e.Ordering == webhookd.OrderingFIFO,
		Filter: string(e.Filter), Transformation: deref(e.Transformation)}
	var other []string
	for _, t := range e.EventTypes {
		if slices.ContainsFunc(catalog, func(c storage.EventTypeRow) bool { return c.Name == t }) {
			f.EventTypes = append(f.EventTypes, t)
		} else {
			other = append(other, t)
		}
	}
	f.OtherTypes = strings.Join(other, ", ")
	return f
}

// readEndpointForm reads and checks a posted endpoint form: the URL as the
// API accepts it, the description and event types within the API's limits.
// A problem is returned as a sentence for the form.
func (s *Server) readEndpointForm(w http.ResponseWriter, r *http.Request) (endpointFormView, []string, string) {
	// A transformation may have 64 KiB, encoded twice that and more.
	r.Body = http.MaxBytesReader(w, r.Body, 256<<10)
	if err := r.ParseForm(); err != nil {
		return endpointFormView{}, nil, "The form could not be read."
	}
	f := endpointFormView{URL: strings.TrimSpace(r.PostForm.Get("url")), Description: r.PostForm.Get("description"),
		EventTypes: r.PostForm["event_type"], OtherTypes: r.PostForm.Get("other_types"), Ordered: r.PostForm.Get("ordered") != "",
		Filter:         strings.TrimSpace(r.PostForm.Get("filter")),
		Transformation: strings.ReplaceAll(r.PostForm.Get("transformation"), "\r\n", "\n")}
	if strings.TrimSpace(f.Transformation) == "" {
		f.Transformation = ""
	}
	types := slices.Clone(f.EventTypes)
	for _, t := range strings.Split(f.OtherTypes, ",") {
		if t = strings.TrimSpace(t); t != "" {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	types = slices.Compact(types)
	if msg := s.checkEndpointURL(f.URL); msg != "" {
		return f, nil, msg
	}
	if len(f.Description) > maxFormDescription {
		return f, nil, fmt.Sprintf("The description must be at most %d characters.", maxFormDescription)
	}
	if len(types) > maxFormEventTypes {
		return f, nil, fmt.Sprintf("Choose at most %d event types.", maxFormEventTypes)
	}
	for _, t := range types {
		if !formEventType.MatchString(t) {
			return f, nil, fmt.Sprintf("%q is not an event type: 1 to 128 characters of A-Z a-z 0-9 . _ : -", t)
		}
	}
	if f.Filter != "" {
		if _, err := endpointfilter.Compile([]byte(f.Filter)); err != nil {
			return f, nil, "The filter: " + err.Error()
		}
	}
	if f.Transformation != "" {
		if err := s.transforms.Check(f.Transformation); err != nil {
			return f, nil, "The transformation: " + transformMessage(err)
		}
	}
	if types == nil {
		types = []string{}
	}
	return f, types, ""
}

// filterJSON is the form's filter as stored: compacted JSON, or nil for
// none.
func (f endpointFormView) filterJSON() json.RawMessage {
	if f.Filter == "" {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(f.Filter)) != nil {
		return json.RawMessage(f.Filter)
	}
	return b.Bytes()
}

// transformation is the form's transformation as stored: nil for none.
func (f endpointFormView) transformation() *string {
	if f.Transformation == "" {
		return nil
	}
	return &f.Transformation
}

// transformMessage is a transformation's error as a form shows it.
func transformMessage(err error) string {
	var te *transform.Error
	if errors.As(err, &te) {
		return te.Message
	}
	return err.Error()
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// checkEndpointURL applies the API's rules for endpoint URLs (a relay's
// relay://NAME, or webhookd.ParseEndpointURL and no local or private host
// unless Config.AllowPrivateNetworks).
func (s *Server) checkEndpointURL(raw string) string {
	if _, ok := webhookd.RelayName(raw); ok { // `webhookd listen`'s: nothing is dialled
		return ""
	}
	u, err := webhookd.ParseEndpointURL(raw)
	if err != nil {
		return "The URL must be an absolute http or https address that can be reached, such as https://example.com/webhooks."
	}
	if s.cfg.AllowPrivateNetworks {
		return ""
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "The URL must not point at localhost."
	}
	if ip, err := netip.ParseAddr(host); err == nil && !netguard.Allowed(ip) {
		return "The URL must not point at a loopback, private, link-local or multicast address."
	}
	return ""
}

// createEndpoint adds an endpoint to the portal's project, as POST
// /v1/endpoints does, and shows its page.
func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request) {
	sc := scopeOf(r.Context())
	if !sc.portal() { // the operator creates endpoints through the API
		s.render(w, r, http.StatusNotFound, errorPage("Not found", "There is no page here."))
		return
	}
	f, types, msg := s.readEndpointForm(w, r)
	if msg != "" {
		f.Error = msg
		s.renderEndpoints(w, r, http.StatusBadRequest, f)
		return
	}
	secret, err := newSecret()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	e, err := s.store.CreateEndpoint(r.Context(), sc.ProjectID, storage.NewEndpoint{URL: f.URL, Description: f.Description,
		EventTypes: types, Ordering: f.ordering(), Filter: f.filterJSON(), Transformation: f.transformation(), Secret: secret}, s.cfg.Clock.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	redirect(w, r, endpointPath(e.ID)+"?saved=1")
}

// endpointPage shows an endpoint of the scope with its form.
func (s *Server) endpointPage(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	v, catalog, err := s.endpointView(r.Context(), ep)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Form, v.Saved = formOf(ep, catalog), r.URL.Query().Get("saved") == "1"
	s.render(w, r, http.StatusOK, endpointPage(v))
}

// endpointView is what an endpoint's page shows besides its form (its
// lifecycle, the preview pane's choices), and the scope's catalog, which
// the form offers: the page as first shown, after a refused save and after
// a preview alike.
func (s *Server) endpointView(ctx context.Context, ep webhookd.Endpoint) (endpointPageView, []storage.EventTypeRow, error) {
	catalog, err := s.catalog(ctx, ep.ProjectID)
	if err != nil {
		return endpointPageView{}, nil, err
	}
	lifecycle, err := s.store.EndpointLifecycle(ctx, ep.ProjectID, ep.ID, lifecycleLimit)
	if err != nil {
		return endpointPageView{}, nil, err
	}
	preview, err := s.previewChoices(ctx, ep, catalog)
	if err != nil {
		return endpointPageView{}, nil, err
	}
	return endpointPageView{E: ep, Preview: preview, Lifecycle: lifecycle, Now: s.cfg.Clock.Now()}, catalog, nil
}

// updateEndpoint changes an endpoint's URL, description and event types,
// as PATCH /v1/endpoints/{id} does.
func (s *Server) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	f, types, msg := s.readEndpointForm(w, r)
	if msg != "" {
		v, catalog, err := s.endpointView(r.Context(), ep)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		f.Catalog, f.Error = catalog, msg
		v.Form = f
		s.render(w, r, http.StatusBadRequest, endpointPage(v))
		return
	}
	_, err := s.store.UpdateEndpoint(r.Context(), ep.ProjectID, ep.ID, storage.EndpointPatch{URL: &f.URL,
		Description: &f.Description, EventTypes: &types, Ordering: ptr(f.ordering()), Filter: ptr(f.filterJSON()),
		Transformation: ptr(f.transformation())}, s.cfg.Clock.Now())
	if webhookd.ErrorCode(err) == webhookd.CodeNotFound {
		redirect(w, r, "/endpoints?done="+webhookd.CodeNotFound)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	redirect(w, r, endpointPath(ep.ID)+"?saved=1")
}

// eventTypesPage shows the catalog of the scope: the portal's project's,
// or every project's.
func (s *Server) eventTypesPage(w http.ResponseWriter, r *http.Request) {
	rows, err := s.catalog(r.Context(), scopeOf(r.Context()).ProjectID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, eventTypesPage(eventTypesView{Rows: rows}))
}
