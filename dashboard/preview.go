package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/webhookd/webhookd"
	endpointfilter "github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/transform"
)

// The preview pane of an endpoint's page (SPEC §3 "Filters and
// transformations"): the endpoint form's filter and transformation, saved
// or not, tried on a past event of the endpoint, on an example from the
// project's catalog (picked from the types that have one), or on a type
// and data (the catalog's example when the data is left empty), showing
// whether the
// filter matches and the request the transformation makes beside the body
// webhookd would send. It is the form's second button, so it works
// without JavaScript, and it sends and changes nothing.

// previewEvents is how many recent events of the endpoint the pane offers.
const previewEvents = 20

// previewView is the pane: its choices, and what a try showed.
type previewView struct {
	Events  []storage.DeliveryRow // recent deliveries of the endpoint, one per event
	EventID string                // the past event chosen
	// Examples are the catalog's types that have an example, by name;
	// Example is the one chosen.
	Examples []string
	Example  string
	Type     string // or a type and data
	Data     string
	Ran      bool
	Error    string // the event could not be had (no such event, bad JSON)

	Original string // the body webhookd makes of the event, indented
	// HasFilter: the form has a filter; Matched: the event matches it.
	HasFilter, Matched bool
	// HasTransformation: the form has a transformation; TransformError is
	// how it failed on the event (the delivery would be a dead letter).
	HasTransformation bool
	TransformError    string
	// The request that would be sent: Send false when the transformation
	// cancels the delivery.
	Send    bool
	URL     string
	Headers [][2]string // sorted by name
	Body    string      // indented
}

// previewChoices are the pane's choices for ep: its recent events, and
// the types of its project's catalog that have an example.
func (s *Server) previewChoices(ctx context.Context, ep webhookd.Endpoint, catalog []storage.EventTypeRow) (previewView, error) {
	rows, _, err := s.store.DashboardDeliveries(ctx, storage.DashboardFilter{ProjectID: ep.ProjectID, EndpointID: ep.ID,
		Since: s.cfg.Clock.Now().Add(-s.cfg.Window)}, storage.Page{Limit: previewEvents})
	v := previewView{Events: rows}
	for _, t := range catalog {
		if len(t.Example) > 0 {
			v.Examples = append(v.Examples, t.Name)
		}
	}
	return v, err
}

// previewEndpoint serves POST /endpoints/{id}/preview: the page again,
// the form as entered (not saved), with the pane's result.
func (s *Server) previewEndpoint(w http.ResponseWriter, r *http.Request) {
	ep, ok := s.endpointOf(w, r)
	if !ok {
		return
	}
	v, catalog, err := s.endpointView(r.Context(), ep)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, _, msg := s.readEndpointForm(w, r)
	f.Catalog, f.Error = catalog, msg
	p := &v.Preview
	p.EventID = strings.TrimSpace(r.PostForm.Get("preview_event"))
	p.Example = strings.TrimSpace(r.PostForm.Get("preview_example"))
	p.Type = strings.TrimSpace(r.PostForm.Get("preview_type"))
	p.Data = r.PostForm.Get("preview_data")
	code := http.StatusOK
	if msg != "" { // the filter or the transformation does not check: the form says why
		code = http.StatusBadRequest
	} else {
		s.runPreview(r.Context(), ep, f, catalog, p)
	}
	v.Form = f
	s.render(w, r, code, endpointPage(v))
}

// runPreview tries f's filter and transformation on the event p names.
func (s *Server) runPreview(ctx context.Context, ep webhookd.Endpoint, f endpointFormView, catalog []storage.EventTypeRow, p *previewView) {
	p.Ran = true
	ev, msg := s.previewEvent(ctx, ep, catalog, p)
	if msg != "" {
		p.Error = msg
		return
	}
	original, err := ev.Body()
	if err != nil {
		p.Error = "The event cannot be shown: " + err.Error()
		return
	}
	p.Original = indented(original)
	if f.Filter != "" {
		flt, _ := endpointfilter.Compile([]byte(f.Filter)) // the form checked it
		p.HasFilter, p.Matched = true, flt.Match(ev.Type, ev.Data)
	}
	url := f.URL
	if url == "" {
		url = ep.URL
	}
	w, err := transform.WebhookOf(url, ev)
	if err != nil {
		p.Error = "The event cannot be shown: " + err.Error()
		return
	}
	res := transform.Result{URL: w.URL, Headers: w.Headers, Body: w.Payload}
	if f.Transformation != "" {
		p.HasTransformation = true
		if res, err = s.transforms.Run(ctx, "preview:"+ep.ID, f.Transformation, w); err != nil {
			p.TransformError = transformMessage(err)
			return
		}
	}
	if res.Cancel {
		return
	}
	p.Send, p.URL, p.Body = true, res.URL, indented(res.Body)
	res.Headers["content-type"] = "application/json"
	for k, v := range res.Headers {
		p.Headers = append(p.Headers, [2]string{k, v})
	}
	slices.SortFunc(p.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
}

// previewEvent is the event the pane tries: the past one chosen, else the
// catalog's example chosen, else the type and data entered (the catalog's
// example when the data is empty).
func (s *Server) previewEvent(ctx context.Context, ep webhookd.Endpoint, catalog []storage.EventTypeRow, p *previewView) (webhookd.Event, string) {
	if p.EventID != "" {
		ev, err := s.store.GetEvent(ctx, ep.ProjectID, p.EventID)
		if err != nil {
			return ev, "No event " + p.EventID + " in this endpoint's project."
		}
		return ev, ""
	}
	if p.Example != "" {
		i := slices.IndexFunc(catalog, func(c storage.EventTypeRow) bool { return c.Name == p.Example })
		if i < 0 || len(catalog[i].Example) == 0 {
			return webhookd.Event{}, "The catalog has no example of " + p.Example + "."
		}
		return s.previewOf(ep, p.Example, catalog[i].Example), ""
	}
	if !formEventType.MatchString(p.Type) {
		return webhookd.Event{}, "Choose a past event, or enter an event type (1 to 128 characters of A-Z a-z 0-9 . _ : -) and its data."
	}
	data := json.RawMessage(strings.TrimSpace(p.Data))
	if len(data) == 0 {
		i := slices.IndexFunc(catalog, func(c storage.EventTypeRow) bool { return c.Name == p.Type })
		if i < 0 || len(catalog[i].Example) == 0 {
			return webhookd.Event{}, "Enter the event's data (JSON): the catalog has no example of " + p.Type + "."
		}
		data = catalog[i].Example
		p.Data = string(data)
	}
	if !json.Valid(data) {
		return webhookd.Event{}, "The event's data must be JSON."
	}
	return s.previewOf(ep, p.Type, data), ""
}

// previewOf is an event of ep's project made up for the pane.
func (s *Server) previewOf(ep webhookd.Endpoint, typ string, data json.RawMessage) webhookd.Event {
	return webhookd.Event{ID: "evt_preview", ProjectID: ep.ProjectID, Type: typ, Data: data, CreatedAt: s.cfg.Clock.Now()}
}

// previewOtherwise says what the pane tries when no past event is chosen.
func previewOtherwise(p previewView) string {
	if len(p.Examples) > 0 {
		return "the example or the type and data below"
	}
	return "the type and data below"
}

// indented is JSON text indented for reading, or as it is if it is not JSON.
func indented(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return string(b)
	}
	return out.String()
}
