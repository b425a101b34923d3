package main

import "testing"

// TestEnvListTakesOnlyWebhookdSettings: -env and -baseline-env pass
// WEBHOOKD_ settings to the measured processes, and nothing else.
func TestEnvListTakesOnlyWebhookdSettings(t *testing.T) {
	var e envList
	for _, ok := range []string{"WEBHOOKD_ENDPOINT_INITIAL_LIMIT=100", "WEBHOOKD_LOG_LEVEL=", "WEBHOOKD_X=a=b"} {
		if err := e.Set(ok); err != nil {
			t.Errorf("Set(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"PATH=/tmp", "WEBHOOKD_lower=1", "WEBHOOKD_LOG_LEVEL", "=1", "WEBHOOKD_=1"} {
		if err := e.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
	if got := e.String(); got != "WEBHOOKD_ENDPOINT_INITIAL_LIMIT=100 WEBHOOKD_LOG_LEVEL= WEBHOOKD_X=a=b" {
		t.Errorf("String() = %q", got)
	}
}
