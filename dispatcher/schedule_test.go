package dispatcher

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	tests := []struct {
		in      string
		want    Schedule
		wantErr string // substring of the error; "" for none
	}{
		{in: "1m,15m,1h,24h", want: Schedule{time.Minute, 15 * time.Minute, time.Hour, 24 * time.Hour}},
		{in: "", want: DefaultSchedule},
		{in: "  ", want: DefaultSchedule},
		{in: "1s, 2s ,3s", want: Schedule{time.Second, 2 * time.Second, 3 * time.Second}},
		{in: "500ms", want: Schedule{500 * time.Millisecond}},
		{in: "1m,,1h", wantErr: "item 2: empty"},
		{in: "1m,", wantErr: "item 2: empty"},
		{in: "1m,soon", wantErr: `item 2: time: invalid duration "soon"`},
		{in: "10", wantErr: `item 1: time: missing unit in duration "10"`},
		{in: "1m,0s", wantErr: `item 2 "0s": must be positive`},
		{in: "-1m", wantErr: `item 1 "-1m": must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSchedule(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSchedule(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSchedule(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParseSchedule(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseScheduleDefaultIsACopy(t *testing.T) {
	got, err := ParseSchedule("")
	if err != nil {
		t.Fatal(err)
	}
	got[0] = time.Hour
	if DefaultSchedule[0] != time.Minute {
		t.Fatalf("changing the parsed schedule changed DefaultSchedule: %v", DefaultSchedule)
	}
}

func TestScheduleDelay(t *testing.T) {
	s := DefaultSchedule
	if got := s.MaxAttempts(); got != 5 {
		t.Fatalf("MaxAttempts() = %d, want 5", got)
	}
	tests := []struct {
		attempt int
		want    time.Duration
		ok      bool
	}{
		{attempt: 0},
		{attempt: 1, want: time.Minute, ok: true},
		{attempt: 2, want: 15 * time.Minute, ok: true},
		{attempt: 3, want: time.Hour, ok: true},
		{attempt: 4, want: 24 * time.Hour, ok: true},
		{attempt: 5},
		{attempt: 6},
	}
	for _, tt := range tests {
		got, ok := s.Delay(tt.attempt)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Delay(%d) = %v, %v; want %v, %v", tt.attempt, got, ok, tt.want, tt.ok)
		}
	}
	if got := (Schedule{}).MaxAttempts(); got != 1 {
		t.Errorf("empty Schedule MaxAttempts() = %d, want 1", got)
	}
}

// TestRetryDelay: a RetryAt comes back at its time rounded up to asynq's
// whole seconds, never early; an error comes back a second after the
// first, doubling to errorRetryMax.
func TestRetryDelay(t *testing.T) {
	for retried, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := retryDelay(retried, errors.New("postgres down"), nil); got != want {
			t.Errorf("after %d errors: %v, want %v", retried, got, want)
		}
	}
	at := time.Now().Add(1500 * time.Millisecond)
	got := retryDelay(7, &RetryAt{At: at}, nil)
	if back := time.Now().Add(got); back.Before(at) || back.Sub(at) > time.Second+100*time.Millisecond {
		t.Errorf("RetryAt %v comes back at %v", at, back)
	}
}
