package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// Inspector makes "Send to inspector" attempts (dispatcher.Inspector): one
// signed attempt of the delivery to url through rt, logged with trigger
// inspector, that never changes the delivery. A missing delivery is
// not_found.
type Inspector interface {
	Send(ctx context.Context, deliveryID, url string, rt http.RoundTripper) (webhookd.Attempt, error)
}

// binPath is where a bin receives requests, on the dashboard listener.
func binPath(id string) string { return "/in/" + url.PathEscape(id) }

// binURL is the absolute URL of a bin as the browser reaches the dashboard.
func binURL(r *http.Request, id string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + binPath(id)
}

// receive keeps a request posted to a bin (no login: webhookd and other
// senders post here) and answers 200 {"inspector_request_id":"ir_..."}; an
// unknown bin is 404, a body over the limit 413, and neither keeps anything.
func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	s.receiveInto(w, r, r.PathValue("bin"))
}

// receiveInto keeps r in bin.
func (s *Server) receiveInto(w http.ResponseWriter, r *http.Request, bin string) {
	w.Header().Set("Content-Type", "application/json")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.InspectorMaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprintf(w, `{"error":"the inspector keeps bodies of at most %d bytes"}`+"\n", s.cfg.InspectorMaxBody)
		return
	case err != nil:
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"the request body could not be read"}`+"\n")
		return
	}
	headers := r.Header.Clone()
	headers["Host"] = []string{r.Host} // net/http moves it out of Header
	id, err := s.store.CaptureInspectorRequest(r.Context(), storage.InspectorRequest{BinID: bin,
		Method: r.Method, Path: r.URL.RequestURI(), RemoteAddr: r.RemoteAddr, Headers: headers, Body: body,
		ReceivedAt: s.cfg.Clock.Now()}, s.cfg.InspectorKeep)
	switch {
	case webhookd.ErrorCode(err) == webhookd.CodeNotFound:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"no such inspector bin"}`+"\n")
		return
	case err != nil:
		s.log.Error("inspector: keeping a request failed", "err", err)
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":"the request could not be kept"}`+"\n")
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"inspector_request_id": id})
}

// sendToInspector makes a "Send to inspector" attempt of a delivery to the
// inspector's own bin, served in-process (no network, no SSRF guard), and
// shows what arrived.
func (s *Server) sendToInspector(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.cfg.Inspector == nil {
		s.render(w, r, http.StatusNotFound, errorPage("No inspector", "This process cannot send to the inspector."))
		return
	}
	rt := localTransport{remoteAddr: "webhookd (in-process)", h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.receiveInto(w, r, storage.InspectorSendBin)
	})}
	a, err := s.cfg.Inspector.Send(r.Context(), id, binURL(r, storage.InspectorSendBin), rt)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var got struct {
		ID string `json:"inspector_request_id"`
	}
	if json.Unmarshal([]byte(a.ResponseBody), &got) != nil || got.ID == "" {
		s.log.Error("inspector: the bin kept nothing", "delivery_id", id, "request_id", a.RequestID,
			"response", a.ResponseBody)
		s.render(w, r, http.StatusInternalServerError, errorPage("The inspector kept nothing",
			"The attempt was made and logged, but the inspector did not keep it; the server log says why."))
		return
	}
	http.Redirect(w, r, inspectorRequestPath(got.ID), http.StatusSeeOther)
}

func inspectorRequestPath(id string) string { return "/inspector/requests/" + url.PathEscape(id) }
func inspectorBinPath(id string) string     { return "/inspector/bins/" + url.PathEscape(id) }

// inspectorPage lists the bins and offers a new one.
func (s *Server) inspectorPage(w http.ResponseWriter, r *http.Request) {
	bins, err := s.store.InspectorBins(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := inspectorView{Now: s.cfg.Clock.Now()}
	for _, b := range bins {
		v.Bins = append(v.Bins, binRow{Bin: b, URL: binURL(r, b.ID)})
	}
	s.render(w, r, http.StatusOK, inspectorList(v))
}

// createBin makes a bin and opens it.
func (s *Server) createBin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" {
		name = "Bin"
	}
	if utf8.RuneCountInString(name) > 128 {
		s.render(w, r, http.StatusBadRequest, errorPage("Name too long", "A bin's name is at most 128 characters; nothing was made."))
		return
	}
	b, err := s.store.CreateInspectorBin(r.Context(), name, s.cfg.Clock.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, inspectorBinPath(b.ID), http.StatusSeeOther)
}

// binPage shows a bin's URL and what it received, newest first.
func (s *Server) binPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	b, err := s.store.InspectorBinByID(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reqs, err := s.store.InspectorRequests(ctx, b.ID, s.cfg.InspectorKeep)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := binView{Bin: b, URL: binURL(r, b.ID), Now: s.cfg.Clock.Now()}
	for _, q := range reqs {
		v.Requests = append(v.Requests, s.captured(ctx, q))
	}
	s.render(w, r, http.StatusOK, binDetail(v))
}

// requestPage shows one request a bin received.
func (s *Server) requestPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, err := s.store.InspectorRequestByID(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.store.InspectorBinByID(ctx, q.BinID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, requestDetail(requestView{Bin: b, R: s.captured(ctx, q), Now: s.cfg.Clock.Now()}))
}

// captured is a received request ready to show, with its signature
// checked.
func (s *Server) captured(ctx context.Context, q storage.InspectorRequest) capturedView {
	v := capturedView{R: q, Body: bodyText(q.Body), Check: s.checkSignature(ctx, q)}
	names := make([]string, 0, len(q.Headers))
	for k := range q.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, val := range q.Headers[k] {
			v.Headers = append(v.Headers, [2]string{k, val})
		}
	}
	return v
}

// bodyText is a body as text: indented when it is JSON, with bytes that
// are not UTF-8 replaced.
func bodyText(b []byte) string {
	if json.Valid(b) {
		return prettyJSON(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

type binRow struct {
	Bin storage.InspectorBin
	URL string // where it receives
}

type inspectorView struct {
	Bins []binRow
	Now  time.Time
}

type binView struct {
	Bin      storage.InspectorBin
	URL      string
	Requests []capturedView
	Now      time.Time
}

type requestView struct {
	Bin storage.InspectorBin
	R   capturedView
	Now time.Time
}

// capturedView is a received request as the inspector shows it.
type capturedView struct {
	R       storage.InspectorRequest
	Headers [][2]string // name, value; sorted by name
	Body    string
	Check   signatureCheck
}

// checkLabel is the headline of a signature check.
func checkLabel(c signatureCheck) string {
	switch c.State {
	case "valid":
		return "signature valid"
	case "invalid":
		return "signature invalid"
	}
	return "signature not checked"
}
