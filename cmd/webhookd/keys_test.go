package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/testenv"
)

// webhookdCmd runs this binary as webhookd with args and vars and returns
// its stdout, stderr and exit code.
func webhookdCmd(t *testing.T, vars map[string]string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1")
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestKeysListAndRevoke: keys list shows a project's keys; keys revoke
// turns one off (the API answers 401 to it, and only to it), says so, and
// is safe to repeat; a prefix that names no key or two keys, an unknown
// project and a bad argument are refused, exit 1, and change nothing;
// usage errors exit 2.
func TestKeysListAndRevoke(t *testing.T) {
	t.Parallel()
	name, dbURL := testenv.Schema(t)
	_, redisURL := testenv.Redis(t)
	vars := map[string]string{"WEBHOOKD_DATABASE_URL": dbURL, "WEBHOOKD_REDIS_URL": redisURL}
	ctx := context.Background()
	if err := run(ctx, []string{"migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	newKey := func(project string) string {
		var out bytes.Buffer
		if err := run(ctx, []string{"keys", "create", "--project", project}, env(vars), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out.String())
	}
	first, second := newKey("acme"), newKey("acme")
	newKey("other")

	out, errOut, code := webhookdCmd(t, vars, "keys", "list", "--project", "acme")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	row := regexp.MustCompile(`^(key_[0-9A-Z]{26}) +(whk_\S{4}) +(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) +(-|\S+Z)$`)
	if code != 0 || len(lines) != 3 || !regexp.MustCompile(`^ID +PREFIX +CREATED +REVOKED$`).MatchString(lines[0]) {
		t.Fatalf("keys list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var firstID string
	for i, key := range []string{first, second} {
		m := row.FindStringSubmatch(lines[i+1])
		if m == nil || m[2] != key[:8] || m[4] != "-" {
			t.Fatalf("keys list row %q: want %s, not revoked", lines[i+1], key[:8])
		}
		if i == 0 {
			firstID = m[1]
		}
	}

	// An API process on the same database.
	cfg := DefaultConfig()
	cfg.DatabaseURL, cfg.RedisURL, cfg.APIAddr = testenv.DatabaseURL(), redisURL, "127.0.0.1:0"
	m := NewMain(cfg, io.Discard)
	m.SearchPath = name
	t.Cleanup(m.Close)
	if err := m.Start(ctx, Roles{API: true}); err != nil {
		t.Fatal(err)
	}
	status := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+m.APIAddr+"/v1/endpoints", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status(first) != 200 || status(second) != 200 {
		t.Fatal("the new keys do not work")
	}

	out, errOut, code = webhookdCmd(t, vars, "keys", "revoke", first[:8])
	if want := "revoked " + firstID + " (" + first[:8] + ", project acme)\n"; code != 0 || out != want {
		t.Fatalf("keys revoke: exit %d, stdout %q (want %q), stderr %q", code, out, want, errOut)
	}
	deadline := time.Now().Add(5 * time.Second) // the API may remember a key for a moment
	for status(first) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("a revoked key still works after 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status(second) != 200 {
		t.Fatal("revoking one key turned another off")
	}
	out, errOut, code = webhookdCmd(t, vars, "keys", "revoke", firstID)
	if code != 0 || !strings.HasPrefix(out, firstID+" ("+first[:8]+", project acme) was already revoked at ") {
		t.Fatalf("revoking again: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, _ = webhookdCmd(t, vars, "keys", "list", "--project", "acme")
	if m := row.FindStringSubmatch(strings.Split(out, "\n")[1]); m == nil || m[4] == "-" {
		t.Fatalf("keys list after revoke: %q", out)
	}

	// A second key with the same prefix as the working one: its prefix is
	// now ambiguous and refused.
	hash := make([]byte, 32)
	rand.Read(hash)
	if _, err := m.DB.Pool().Exec(ctx, `INSERT INTO api_keys (id, project_id, key_hash, prefix)
		SELECT 'key_TWIN', project_id, $2, prefix FROM api_keys WHERE prefix = $1 AND revoked_at IS NULL`, second[:8], hash); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"keys", "revoke", second[:8]}, 1, "matches 2 keys that work"},
		{[]string{"keys", "revoke", "key_NOSUCHKEY"}, 1, "no API key matches"},
		{[]string{"keys", "revoke", "hello"}, 1, "give the key's id"},
		{[]string{"keys", "list", "--project", "nosuch"}, 1, `no project is named "nosuch"`},
		{[]string{"keys", "revoke"}, 2, "want KEY_PREFIX"},
		{[]string{"keys", "revoke", "a", "b"}, 2, `unexpected argument "b"`},
		{[]string{"keys", "list"}, 2, "--project NAME is required"},
		{[]string{"keys", "frobnicate"}, 2, "usage: webhookd keys"},
	} {
		out, errOut, code := webhookdCmd(t, vars, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d saying %q", tc.args, code, out, errOut, tc.code, tc.says)
		}
		checkErrorForm(t, tc.args, errOut)
	}
	if status(second) != 200 {
		t.Fatal("a refused revoke changed something")
	}
}
