package wire

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	// now is 200 ms past a whole second, as the clock usually is.
	now := time.Date(2025, 3, 1, 12, 0, 0, 200*int(time.Millisecond), time.UTC)
	date := func(d time.Duration) string {
		return now.Truncate(time.Second).Add(d).Format(http.TimeFormat)
	}
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"seconds", "120", 120 * time.Second, true},
		{"zero seconds", "0", 0, true},
		{"padded", " 5 ", 5 * time.Second, true},
		{"seconds over the cap", "86401", 24 * time.Hour, true},
		{"seconds at the cap", "86400", 24 * time.Hour, true},
		{"seconds overflowing int64", "99999999999999999999999", 24 * time.Hour, true},
		{"http date 1.8 s ahead rounds up", date(2 * time.Second), 2 * time.Second, true},
		{"http date 0.8 s ahead rounds up", date(time.Second), time.Second, true},
		{"http date an hour ahead", date(time.Hour), time.Hour, true},
		{"http date past", date(-time.Minute), 0, true},
		{"http date now, second truncated", date(0), 0, true},
		{"http date beyond the cap", date(48 * time.Hour), 24 * time.Hour, true},
		{"rfc 850 date", now.Add(10 * time.Second).Format(time.RFC850), 10 * time.Second, true},
		{"empty", "", 0, false},
		{"negative", "-5", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"garbage", "soon", 0, false},
		{"duration syntax", "5s", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.in, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestParseRetryAfterNeverEarly checks the rule of SPEC §3 directly: now plus
// the returned wait is never before the date the receiver named.
func TestParseRetryAfterNeverEarly(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 10, 0, time.UTC)
	for ms := 0; ms < 10_000; ms += 137 {
		now := at.Add(-time.Duration(ms) * time.Millisecond)
		d, ok := ParseRetryAfter(at.Format(http.TimeFormat), now)
		if !ok || now.Add(d).Before(at) || d%time.Second != 0 {
			t.Fatalf("now %v: wait %v, %v lands before %v or is not whole seconds", now, d, ok, at)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{
		"0", "120", "86401", "99999999999999999999", "-1", "", " 7 ", "1.5",
		"Sat, 01 Mar 2025 12:00:02 GMT", "Saturday, 01-Mar-25 12:00:02 GMT",
		"Sat Mar  1 12:00:02 2025", "Mon, 01 Jan 0001 00:00:00 GMT",
		"Fri, 31 Dec 9999 23:59:59 GMT",
	} {
		f.Add(seed, int64(0))
	}
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string, offset int64) {
		now := base.Add(time.Duration(offset))
		d, ok := ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", v, d)
			}
			return
		}
		if d < 0 || d > 24*time.Hour || d%time.Second != 0 {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v: want whole seconds in [0, 24h]", v, now, d)
		}
	})
}
