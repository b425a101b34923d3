package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// statuses are the delivery states the status filter offers.
var statuses = webhookd.DeliveryStatuses

// filter is the deliveries page's filter as it stands in the URL query, so
// a view can be shared and bookmarked.
type filter struct {
	Status     string // status
	Project    string // project (a project id)
	Endpoint   string // endpoint (an endpoint id)
	EventType  string // event_type
	EventID    string // event_id
	DeliveryID string // delivery_id
}

func filterOf(q url.Values) filter {
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return filter{Status: get("status"), Project: get("project"), Endpoint: get("endpoint"),
		EventType: get("event_type"), EventID: get("event_id"), DeliveryID: get("delivery_id")}
}

// any reports whether any filter is set.
func (f filter) any() bool { return f != filter{} }

// query returns the filter as a URL query, with cursor when it is set.
func (f filter) query(cursor string) string {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "project": f.Project, "endpoint": f.Endpoint,
		"event_type": f.EventType, "event_id": f.EventID, "delivery_id": f.DeliveryID, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return "/"
	}
	return "/?" + q.Encode()
}

// validate names the first bad filter value.
func (f filter) validate() string {
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		return "Unknown status: choose pending, retrying, succeeded or dead letter."
	}
	return ""
}

type deliveriesView struct {
	Chart    *chartView // the overview, on the first page
	Filter   filter
	Projects []webhookd.Project
	Rows     []storage.DeliveryRow
	Window   string
	Now      time.Time
	Error    string
	FirstURL string // set when this is not the first page
	NextURL  string // set when older deliveries follow
}

type deliveryView struct {
	D          storage.DeliveryDetail
	CanInspect bool   // the Send to inspector button
	Payload    string // pretty JSON
	Now        time.Time
	Flash      string
	FlashKind  string // ok or error
}

func deliveryPath(id string) string { return "/deliveries/" + url.PathEscape(id) }

func statusLabel(s string) string { return strings.ReplaceAll(s, "_", " ") }

func itoa(n int) string { return strconv.Itoa(n) }

func utc(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// age says how long ago (or how far ahead) t is from now, roughly.
func age(now, t time.Time) string {
	d := now.Sub(t)
	suffix := "ago"
	if d < 0 {
		d, suffix = -d, "from now"
	}
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s %s", int(d.Seconds()), suffix)
	case d < time.Hour:
		return fmt.Sprintf("%d min %s", int(d.Minutes()), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %s", int(d.Hours()), suffix)
	default:
		return fmt.Sprintf("%d days %s", int(d.Hours()/24), suffix)
	}
}

// waitingWording is what the dashboard and the portal say of a delivery's
// waiting reason (webhookd.Waiting*), beside its next attempt time.
var waitingWording = map[string]string{
	webhookd.WaitingSchedule:     "next retry on schedule",
	webhookd.WaitingEndpointBusy: "held back: endpoint at its concurrency limit",
	webhookd.WaitingRateLimit:    "held back: rate limit",
	webhookd.WaitingCircuitOpen:  "waiting for its circuit's next probe",
	webhookd.WaitingFIFOTurn:     "waiting for its turn in the ordered queue",
}

// waitingLabel words a waiting reason; one it does not know, as it is.
func waitingLabel(reason string) string {
	if w, ok := waitingWording[reason]; ok {
		return w
	}
	return statusLabel(reason)
}

func httpStatus(code *int) string {
	if code == nil {
		return "—"
	}
	return strconv.Itoa(*code)
}

// statusClass colours an HTTP status: 2xx ok, 4xx/5xx and errors bad.
func statusClass(code *int) string {
	switch {
	case code == nil:
		return "code-err"
	case *code < 300:
		return "code-ok"
	case *code < 400:
		return "code-warn"
	default:
		return "code-err"
	}
}

// attemptOutcome is the status of an attempt, its error, or both.
func attemptOutcome(a webhookd.Attempt) string {
	switch {
	case a.StatusCode != nil && a.Error != nil:
		return fmt.Sprintf("HTTP %d · %s", *a.StatusCode, *a.Error)
	case a.StatusCode != nil:
		return fmt.Sprintf("HTTP %d", *a.StatusCode)
	case a.Error != nil:
		return *a.Error
	}
	return "no answer"
}

func durationMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

// headerLines prints headers one "Name: value" a line, sorted by name.
func headerLines(h map[string]string) string {
	if len(h) == 0 {
		return "(none)"
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s: %s\n", k, h[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// prettyJSON indents a payload for reading; it is shown as text, never as
// HTML.
func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// reasons are the dead-letter reasons the reason filter offers.
var reasons = webhookd.DeadLetterReasons

// deadLetterFilter is the dead letters page's filter, in the URL query.
type deadLetterFilter struct {
	Reason    string // reason
	Project   string // project
	Endpoint  string // endpoint
	EventType string // event_type
}

func deadLetterFilterOf(get func(string) string) deadLetterFilter {
	g := func(k string) string { return strings.TrimSpace(get(k)) }
	return deadLetterFilter{Reason: g("reason"), Project: g("project"), Endpoint: g("endpoint"), EventType: g("event_type")}
}

func (f deadLetterFilter) any() bool { return f != deadLetterFilter{} }

// query returns the page's URL with the filter, extra parameters and the
// cursor when set.
func (f deadLetterFilter) query(cursor string, extra url.Values) string {
	q := url.Values{}
	for k, v := range extra {
		q[k] = v
	}
	for k, v := range map[string]string{"reason": f.Reason, "project": f.Project, "endpoint": f.Endpoint,
		"event_type": f.EventType, "cursor": cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return "/dead-letters"
	}
	return "/dead-letters?" + q.Encode()
}

type deadLettersView struct {
	Filter    deadLetterFilter
	Projects  []webhookd.Project
	Rows      []storage.DeadLetterRow
	Window    string
	Now       time.Time
	Error     string
	Flash     string
	FlashKind string
	FirstURL  string
	NextURL   string
}

type jobsView struct {
	Jobs    []storage.JobRow
	Running bool // some job is still queued or running
	Listed  bool // the latest jobs, not those a replay just started
	Now     time.Time
}

// jobKindName names a job's kind for people.
func jobKindName(kind string) string {
	if kind == webhookd.JobEventBulk {
		return "bulk upload"
	}
	return "dead-letter replay"
}

// jobProgress is how far a job has gone: a bulk job's done counts only
// its accepted lines, and its refused ones are behind it too.
func jobProgress(j storage.JobRow) int {
	if j.Kind == webhookd.JobEventBulk {
		return j.Done + j.FailedCount
	}
	return j.Done
}

type endpointsView struct {
	Form      endpointFormView // the form that adds one (portal)
	Rows      []storage.EndpointRow
	Now       time.Time
	Flash     string
	FlashKind string
	FirstURL  string
	NextURL   string
}

func endpointPath(id string) string { return "/endpoints/" + url.PathEscape(id) }

// endpointDisabledLabel says why an endpoint is disabled.
func endpointDisabledLabel(reason *string) string {
	switch {
	case reason != nil && *reason == webhookd.DisabledGone:
		return "disabled: 410 Gone"
	case reason != nil && *reason == webhookd.DisabledFailing:
		return "disabled: failing"
	}
	return "disabled"
}

type secretView struct {
	E                 webhookd.Endpoint
	Previous          string     // the previous secret while it still signs, else ""
	PreviousExpiresAt *time.Time // when it stops
	Rotated           bool       // the page answers a rotation
}

// successRate is the share of finished deliveries that succeeded, as a
// whole percent (rounded down, so 99.9% is not shown as 100%).
func successRate(succeeded, dead int) string {
	return fmt.Sprintf("%d%%", succeeded*100/(succeeded+dead))
}

// successClass colours a success rate: all good, mostly good, or bad.
func successClass(succeeded, dead int) string {
	switch rate := succeeded * 100 / (succeeded + dead); {
	case rate == 100:
		return "code-ok"
	case rate >= 90:
		return "code-warn"
	default:
		return "code-err"
	}
}

// transformationExample is the transformation textarea's placeholder and
// first example: a Slack-shaped message.
const transformationExample = `function handler(webhook) {
  var order = webhook.payload.data;
  webhook.payload = {text: "Order " + order.id + " paid: " + order.total + " " + order.currency};
  return webhook;
}`

// transformationPartnerExample is the second example: a partner's field
// names, a header, a path, and a cancel.
const transformationPartnerExample = `function handler(webhook) {
  var d = webhook.payload.data;
  if (d.test) return {cancel: true};
  webhook.payload = {orderRef: d.id, amountCents: Math.round(d.total * 100), occurredAt: webhook.payload.timestamp};
  webhook.headers["x-partner-key"] = "pk_live_123";
  webhook.url = webhook.url.replace(/\/hooks$/, "/v2/orders");
  return webhook;
}`
