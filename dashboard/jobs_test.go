package dashboard

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/webhookd/webhookd/storage"
)

// bulkJob stores a bulk job of the project with lines lines, queued.
func (f *fixture) bulkJob(projectID string, lines int) string {
	f.t.Helper()
	ctx := context.Background()
	up := f.db.NewBulkUpload(projectID, time.Now())
	body := strings.Repeat(`{"type":"a","data":1}`+"\n", lines)
	if err := up.AddChunk(ctx, 1, lines, []byte(body)); err != nil {
		f.t.Fatal(err)
	}
	var id string
	if _, _, err := up.Commit(ctx, storage.IdempotencyKey{ProjectID: projectID, Key: "k-" + projectID, TTL: time.Hour}, lines, time.Second,
		func(jobID string) (storage.StoredResponse, error) {
			id = jobID
			return storage.StoredResponse{StatusCode: http.StatusAccepted, ContentType: "application/json", Body: []byte(`{}`)}, nil
		}); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func TestJobsListsTheLatestJobsWithProgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	f.seed("acme", 0, "a")
	var acme string
	if err := f.db.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE name = 'acme'`).Scan(&acme); err != nil {
		t.Fatal(err)
	}
	id := f.bulkJob(acme, 40)
	// Half the lines behind it: 15 accepted, 5 refused.
	if _, err := f.db.Pool().Exec(ctx, `UPDATE jobs SET status = 'running', done = 15, failed_count = 5 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	c := f.client()
	f.login(c)
	resp, body := f.do(c, "GET", "/jobs", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /jobs: %d", resp.StatusCode)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	job := doc.Find(`.job[data-job-id="` + id + `"]`)
	bar := job.Find("progress")
	if job.AttrOr("data-kind", "") != "event_bulk" || job.AttrOr("data-status", "") != "running" ||
		bar.AttrOr("value", "") != "20" || bar.AttrOr("max", "") != "40" ||
		!strings.Contains(job.Find(".job-counts").Text(), "15 accepted · 5 refused · 40 lines") {
		t.Fatalf("job %s on /jobs: %s", id, body)
	}
	if doc.Find(`meta[http-equiv="refresh"]`).Length() != 1 || doc.Find(`nav a[href="/jobs"]`).Length() != 1 {
		t.Fatalf("a running job's page refreshes, and the nav links to it: %s", body)
	}
}
