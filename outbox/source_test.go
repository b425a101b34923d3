package outbox

import (
	"strings"
	"testing"
	"time"
)

func TestParseSources(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Source
		err  string
	}{
		{in: "", want: nil},
		{in: "  shop=postgres://a@h/shop  billing=postgres://b:pw@h:5433/bill?sslmode=disable\n",
			want: []Source{{"shop", "postgres://a@h/shop"}, {"billing", "postgres://b:pw@h:5433/bill?sslmode=disable"}}},
		{in: "shop=postgres://a@h/db?search_path=s1", want: []Source{{"shop", "postgres://a@h/db?search_path=s1"}}}, // an = after the first belongs to the URL
		{in: "postgres://a@h/shop", err: "entry 1: want PROJECT=DATABASE_URL"},
		{in: "=postgres://a@h/shop", err: "entry 1: want PROJECT=DATABASE_URL"},
		{in: "shop=postgres://a:secret@h:notaport/x", err: "entry 1 (project shop): not a PostgreSQL URL"},
		{in: "a=postgres://h/x b=postgres://h/x", err: "entry 2 (project b): the same database URL is named twice"},
	} {
		got, err := ParseSources(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseSources(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseSources(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseSources(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestSourceStringHidesPassword(t *testing.T) {
	s := Source{Project: "shop", DatabaseURL: "postgres://app:hunter2@db.internal:5433/shop"}
	if got := s.String(); got != "shop@db.internal:5433/shop" {
		t.Errorf("String() = %q", got)
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		max  time.Duration
		want time.Duration
	}{
		{1, 5 * time.Second, 100 * time.Millisecond},
		{2, 5 * time.Second, 200 * time.Millisecond},
		{6, 5 * time.Second, 3200 * time.Millisecond},
		{7, 5 * time.Second, 5 * time.Second},
		{1000, 5 * time.Second, 5 * time.Second},
		{3, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := backoff(tc.n, tc.max); got != tc.want {
			t.Errorf("backoff(%d, %v) = %v, want %v", tc.n, tc.max, got, tc.want)
		}
	}
}
