package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/testenv"
	"github.com/webhookd/webhookd/storage"
)

// deadLetter makes delivery id a dead letter for reason after one attempt
// answered 400, and returns the dead letter's id.
func (f *fixture) deadLetter(id, reason string) string {
	f.t.Helper()
	testenv.Record(f.t, f.db, id, webhookd.Attempt{StatusCode: ptr(400)},
		storage.Transition{Status: webhookd.DeliveryDeadLetter, DeadLetterReason: reason})
	var dl string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT id FROM dead_letters WHERE delivery_id = $1`, id).Scan(&dl); err != nil {
		f.t.Fatal(err)
	}
	return dl
}

func TestDeadLettersListReplaySelectedAndAll(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, acme := f.seed("acme", 3, "invoice.paid")
	_, globex := f.seed("globex", 1, "invoice.paid")
	dlA0 := f.deadLetter(acme[0], webhookd.ReasonClientError)
	dlA1 := f.deadLetter(acme[1], webhookd.ReasonExhausted)
	dlG0 := f.deadLetter(globex[0], webhookd.ReasonClientError)
	c := f.client()
	f.login(c)

	list := func(path string) (*goquery.Document, []string) {
		t.Helper()
		resp, body := f.do(c, "GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
		var ids []string
		doc.Find("tbody tr").Each(func(_ int, s *goquery.Selection) { ids = append(ids, s.AttrOr("data-dead-letter-id", "")) })
		return doc, ids
	}
	if _, ids := list("/dead-letters"); fmt.Sprint(ids) != fmt.Sprint([]string{dlG0, dlA1, dlA0}) {
		t.Fatalf("dead letters %v", ids)
	}
	doc, ids := list("/dead-letters?reason=exhausted")
	if fmt.Sprint(ids) != fmt.Sprint([]string{dlA1}) {
		t.Fatalf("?reason=exhausted: %v", ids)
	}
	if _, disabled := doc.Find("#replay-all").Attr("disabled"); !disabled {
		t.Errorf("replay all is offered with a reason filter, which a job cannot apply")
	}

	// Replay selected: one manual attempt each, by dashboard; unknown ids are skipped.
	resp, _ := f.do(c, "POST", "/dead-letters/replay", url.Values{"action": {"selected"}, "id": {dlA0, "dl_nope"},
		"reason": {"client_error"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dead-letters?disabled=0&reason=client_error&requested=1" {
		t.Fatalf("replay selected: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	d, _ := f.db.Store().DashboardDelivery(context.Background(), acme[0])
	if d.PendingRedelivery == nil || len(f.queue.manual()) != 1 || f.queue.manual()[0] != [3]string{*d.PendingRedelivery, acme[0], "dashboard"} {
		t.Fatalf("pending %v, enqueued %v", d.PendingRedelivery, f.queue.manual())
	}
	doc, _ = list(resp.Header.Get("Location"))
	if got := doc.Find("#flash").Text(); !strings.Contains(got, "1 redeliveries requested") {
		t.Errorf("flash %q", got)
	}

	// Replay all matching: a job per project with matching dead letters.
	resp, _ = f.do(c, "POST", "/dead-letters/replay", url.Values{"action": {"all"}, "event_type": {"invoice.paid"}}, nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/jobs?") || len(f.queue.enqueuedJobs()) != 2 {
		t.Fatalf("replay all: %d %q, enqueued jobs %v", resp.StatusCode, loc, f.queue.enqueuedJobs())
	}
	doc, _ = list(loc)
	var jobs []string
	doc.Find(".job").Each(func(_ int, s *goquery.Selection) {
		jobs = append(jobs, s.AttrOr("data-job-id", "")+" "+s.AttrOr("data-status", ""))
	})
	if len(jobs) != 2 || !strings.HasSuffix(jobs[0], " queued") || doc.Find(`meta[http-equiv="refresh"]`).Length() != 1 {
		t.Fatalf("jobs page %v", jobs)
	}

	// From another origin: refused, no job made.
	resp, _ = f.do(c, "POST", "/dead-letters/replay", url.Values{"action": {"all"}}, map[string]string{"Sec-Fetch-Site": "same-site"})
	var n int
	f.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobs`).Scan(&n)
	if resp.StatusCode != http.StatusForbidden || n != 2 {
		t.Fatalf("cross-origin replay: %d, %d jobs", resp.StatusCode, n)
	}
	if resp, _ := f.do(c, "GET", "/dead-letters?reason=bogus", nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad reason: %d", resp.StatusCode)
	}
}
