package storage

import (
	"strings"
	"testing"
)

// TestDaySQLNamesTheDaysPartitions: the hot statements kept per day name
// that day's partitions (the parents for ""), each built once, and one
// day's text never answers for another's.
func TestDaySQLNamesTheDaysPartitions(t *testing.T) {
	builds := 0
	c := daySQL{build: func(suffix string) string { builds++; return "FROM " + partition("deliveries", suffix) }}
	for range 2 {
		if got := c.get("p20261206"); got != "FROM deliveries_p20261206" {
			t.Fatalf("get(p20261206) = %q", got)
		}
	}
	if got := c.get(""); got != "FROM deliveries" {
		t.Fatalf("get(\"\") = %q", got)
	}
	if builds != 2 {
		t.Fatalf("%d builds for two suffixes", builds)
	}
	for _, sql := range []string{claimSQL("p20261207"), recordSQL("p20261207")} {
		if unfilled(sql) || !strings.Contains(sql, "deliveries_p20261207") {
			t.Fatalf("a day's statement names %q", sql[:min(len(sql), 200)])
		}
	}
	if sql := recordSQL(""); strings.Contains(sql, "_p2026") || unfilled(sql) {
		t.Fatal("the parents' statement names a day's partition")
	}
}

// unfilled reports whether sql still holds a template's placeholder.
func unfilled(sql string) bool {
	return strings.Contains(sql, "{deliveries}") || strings.Contains(sql, "{events}") || strings.Contains(sql, "{dead_letters}")
}
