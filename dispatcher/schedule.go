package dispatcher

import (
	"fmt"
	"strings"
	"time"
)

// Schedule is the list of delays between attempts: Schedule[i] is the wait
// after failed attempt i+1. The first attempt is made at once, so a
// delivery gets len(Schedule)+1 attempts in all.
type Schedule []time.Duration

// DefaultSchedule retries 1 m, 15 m, 1 h and 24 h after the previous failure:
// 5 attempts over about 25 h (SPEC §3).
var DefaultSchedule = Schedule{time.Minute, 15 * time.Minute, time.Hour, 24 * time.Hour}

// ParseSchedule parses a comma-separated list of Go durations such as
// "1m,15m,1h,24h" (the form of WEBHOOKD_RETRY_SCHEDULE). Spaces around items
// are ignored. An empty or blank string gives a copy of DefaultSchedule. An
// empty item, an unparsable duration or one that is not positive is an error
// naming the item.
func ParseSchedule(s string) (Schedule, error) {
	if strings.TrimSpace(s) == "" {
		return append(Schedule(nil), DefaultSchedule...), nil
	}
	items := strings.Split(s, ",")
	sched := make(Schedule, 0, len(items))
	for i, item := range items {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("retry schedule item %d: empty", i+1)
		}
		d, err := time.ParseDuration(item)
		if err != nil {
			return nil, fmt.Errorf("retry schedule item %d: %w", i+1, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("retry schedule item %d %q: must be positive", i+1, item)
		}
		sched = append(sched, d)
	}
	return sched, nil
}

// MaxAttempts is the number of attempts a delivery gets: the first one plus
// one per delay.
func (s Schedule) MaxAttempts() int { return len(s) + 1 }

// Window is the schedule's whole length: the first attempt to the last.
func (s Schedule) Window() time.Duration {
	var w time.Duration
	for _, d := range s {
		w += d
	}
	return w
}

// Delay returns the wait after failed attempt number attempt (1-based), or
// false when the schedule has no retry left after it.
func (s Schedule) Delay(attempt int) (time.Duration, bool) {
	if attempt < 1 || attempt > len(s) {
		return 0, false
	}
	return s[attempt-1], true
}
