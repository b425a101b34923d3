package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sendProcess runs `webhookd send args...` as a process of its own and
// returns its stdout, stderr and exit code.
func sendProcess(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"send"}, args...)...)
	cmd.Env = append(os.Environ(), "WEBHOOKD_TEST_MAIN=1")
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestSendPrintsTheEventIDOrTheRefusal(t *testing.T) {
	t.Parallel()
	m, key := startMain(t, Roles{API: true}, nil)
	env := []string{"WEBHOOKD_API_URL=http://" + m.APIAddr, "WEBHOOKD_API_KEY=" + key}
	eventID := regexp.MustCompile(`^evt_[0-9A-Z]{26}\n$`)

	out, errOut, code := sendProcess(t, env, "--type", "invoice.paid", "--data", `{"amount":42}`)
	if code != 0 || !eventID.MatchString(out) {
		t.Fatalf("send: exit %d, stdout %q, stderr %q; want the event id alone", code, out, errOut)
	}

	// --data @file, --external-id and a caller's key: the same key again
	// replays the first answer, so the same id comes back.
	file := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(file, []byte(`{"order":7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--type", "order.paid", "--data", "@" + file, "--external-id", "order-7", "--idempotency-key", "k-order-7"}
	first, errOut, code := sendProcess(t, env, args...)
	if code != 0 || !eventID.MatchString(first) {
		t.Fatalf("send @file: exit %d, stdout %q, stderr %q", code, first, errOut)
	}
	again, _, code := sendProcess(t, env, args...)
	if code != 0 || again != first {
		t.Fatalf("send with the same Idempotency-Key: exit %d, %q; want %q again", code, again, first)
	}
	// The same --external-id again, under a new Idempotency-Key (a script
	// run again): the API answers external_id_taken naming the event that
	// holds it, which is the one this names, so send prints its id and
	// succeeds, saying on stderr that nothing new was sent.
	rerun, errOut, code := sendProcess(t, env, "--type", "order.paid", "--data", "@"+file, "--external-id", "order-7")
	if code != 0 || rerun != first || !strings.Contains(errOut, "webhookd: send: external id \"order-7\" was sent before") {
		t.Fatalf("send --external-id again: exit %d, stdout %q, stderr %q; want %q, exit 0 and a note", code, rerun, errOut, first)
	}

	// Refused requests: the API's code and message on stderr, exit 1.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "bad type!", "--data", "1"}, "validation_failed: type: must be"},
		{[]string{"--type", "a", "--data", "1", "--api-key", "whk_wrong"}, "unauthorized: "},
	} {
		out, errOut, code := sendProcess(t, env, c.args...)
		if code != 1 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("send %q: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
		}
		checkErrorForm(t, []string{"send"}, errOut)
	}
	// A bad command line is a usage error: exit 2, nothing sent.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "a", "--data", "{not json"}, "--data: not valid JSON"},
		{[]string{"--data", "1"}, "--type is required"},
	} {
		out, errOut, code := sendProcess(t, env, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("send %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
		checkErrorForm(t, []string{"send"}, errOut)
	}
	var count int
	if err := m.DB.Pool().QueryRow(t.Context(), "SELECT count(*) FROM events").Scan(&count); err != nil || count != 2 {
		t.Fatalf("%d events (%v), want 2: refused requests must create nothing", count, err)
	}
}
