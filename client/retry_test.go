package client

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"5", 5 * time.Second, true},
		{" 0 ", 0, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"Fri, 02 Jan 2026 15:04:15 GMT", 10 * time.Second, true},
		{"Fri, 02 Jan 2026 15:04:00 GMT", 0, true}, // in the past: at once
	} {
		got, ok := parseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestBackoffIsFullJitterUnderACap(t *testing.T) {
	p := RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 60: time.Second} {
		var most time.Duration
		for range 2000 {
			d := p.backoff(n)
			if d < 0 || d > ceiling {
				t.Fatalf("backoff(%d) = %v, want within [0, %v]", n, d, ceiling)
			}
			most = max(most, d)
		}
		if most < ceiling/2 {
			t.Errorf("backoff(%d) never above %v in 2000 draws: not spread up to %v", n, most, ceiling)
		}
	}
	if d := afterRetryAfter(2 * time.Second); d < 2*time.Second || d > 2400*time.Millisecond+time.Millisecond {
		t.Errorf("afterRetryAfter(2s) = %v, want 2s plus at most a fifth", d)
	}
}

func TestErrorsIsMatchesByCode(t *testing.T) {
	err := fmt.Errorf("send: %w", &Error{StatusCode: 404, Code: "not_found", Message: "no such event"})
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) {
		t.Fatalf("errors.Is by code does not work: %v", err)
	}
	if (&Error{StatusCode: 503, Code: "unavailable"}).Temporary() == false ||
		(&Error{StatusCode: 400, Code: "validation_failed"}).Temporary() {
		t.Fatal("Temporary: 503 yes, 400 no")
	}
}
