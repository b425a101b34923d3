package main

import (
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
)

// cliRun runs one command line in this process as main does, with vars as
// its environment, and returns its stdout, stderr and exit code. The
// sinks are locked: go-redis's logger is process-wide (newMain sets it),
// so a Main of another test running beside this one can write a line here
// while this command writes too.
func cliRun(vars map[string]string, args ...string) (string, string, int) {
	var out, errOut lockedBuffer
	code := cli(context.Background(), args, env(vars), &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestHelpNeverShowsASecret runs every command's help, in every way it can
// be asked for, with secrets in its environment (as main does, and a few as
// the real binary): each prints its usage on stdout and exits 0, and no
// secret's value appears in what it prints.
func TestHelpNeverShowsASecret(t *testing.T) {
	t.Parallel()
	secrets := []string{"S3cretAdminToken-0123456789", "S3cretPgPassword", "S3cretRedisPassword",
		"czNjcmV0LWVuY3J5cHRpb24ta2V5LTMyLWJ5dGVzLSE=", "whk_S3cretApiKey0123456789abcdefghijklmnopqrs",
		"S3cretSentinelPassword", "S3cretRedisUserPass", "S3cretApiUrlPass"}
	envs := []map[string]string{{
		"WEBHOOKD_ADMIN_TOKEN":    secrets[0],
		"WEBHOOKD_DATABASE_URL":   "postgres://webhookd:" + secrets[1] + "@db.internal:5432/webhookd?sslmode=require",
		"WEBHOOKD_REDIS_URL":      "redis://:" + secrets[2] + "@cache.internal:6379/0",
		"WEBHOOKD_ENCRYPTION_KEY": "k2:" + secrets[3] + ",k1:" + secrets[3],
		"WEBHOOKD_API_KEY":        secrets[4],
		"WEBHOOKD_API_URL":        "https://bot:" + secrets[7] + "@api.internal",
	}, {
		"WEBHOOKD_ADMIN_TOKEN":  secrets[0],
		"WEBHOOKD_DATABASE_URL": "host=db.internal user=webhookd password=" + secrets[1] + " dbname=webhookd",
		"WEBHOOKD_REDIS_URL": "redis-sentinel://:" + secrets[2] + "@s1:26379,s2:26379/0?master=webhookd&sentinel_password=" +
			secrets[5],
		"WEBHOOKD_ENCRYPTION_KEY": "k1:" + secrets[3],
		"WEBHOOKD_API_KEY":        secrets[4],
	}, {
		"WEBHOOKD_DATABASE_URL": "postgres://webhookd@db.internal/webhookd?password=" + secrets[1],
		"WEBHOOKD_REDIS_URL":    "redis://" + secrets[6] + "@cache.internal:6379/0",
	}}
	asks := [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}, {"keys", "-h"}, {"secrets", "--help"},
		{"help", "keys"}, {"help", "secrets"}}
	for _, c := range commands {
		name := strings.Fields(c.name)
		asks = append(asks, append(name, "-h"), append(name, "--help"), append([]string{"help"}, name...))
	}
	for i, vars := range envs {
		for j, args := range asks {
			run := cliRun
			if i == 0 && (j < 2 || j%7 == 0) { // a few through main and its os.Exit
				run = func(vars map[string]string, args ...string) (string, string, int) {
					return webhookdCmd(t, vars, args...)
				}
			}
			out, errOut, code := run(vars, args...)
			if code != 0 || out == "" || errOut != "" {
				t.Errorf("webhookd %s: exit %d, stdout %d bytes, stderr %q; want usage on stdout, exit 0",
					strings.Join(args, " "), code, len(out), errOut)
			}
			for _, s := range secrets {
				if strings.Contains(out+errOut, s) {
					t.Errorf("webhookd %s printed a secret (%.8s...):\n%s", strings.Join(args, " "), s, out)
				}
			}
		}
	}

	// What help says, with the first environment.
	help := func(args ...string) string {
		out, _, _ := cliRun(envs[0], args...)
		return out
	}
	usage := help("help")
	for _, c := range commands {
		if !strings.Contains(usage, "webhookd "+c.name) {
			t.Errorf("webhookd help does not list %q", c.name)
		}
	}
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"keys", "list", "-h"}, []string{"--project NAME", "--database-url"}, []string{"--worker-concurrency", "--admin-token"}},
		{[]string{"all", "-h"}, []string{"--worker-concurrency", "--api-addr", "WEBHOOKD_ADMIN_TOKEN: set in the environment, value not shown"}, []string{"--project"}},
		{[]string{"worker", "-h"}, []string{"--worker-concurrency"}, []string{"--api-addr", "--admin-token", "--project"}},
		{[]string{"keys", "revoke", "-h"}, []string{"KEY_PREFIX", "--redis-url"}, []string{"--project"}},
		{[]string{"send", "-h"}, []string{"--type TYPE", "WEBHOOKD_API_KEY: set in the environment, value not shown"}, []string{"--database-url"}},
		{[]string{"serve", "-h"}, []string{"postgres://webhookd:xxxxx@db.internal:5432/webhookd", "redis://:xxxxx@cache.internal:6379/0",
			"WEBHOOKD_ENCRYPTION_KEY: set in the environment, value not shown"}, []string{"--retention"}},
		{[]string{"keys", "-h"}, []string{"webhookd keys create", "webhookd keys list", "webhookd keys revoke"}, []string{"secrets"}},
		{[]string{"secrets", "-h"}, []string{"webhookd secrets reseal"}, []string{"keys"}},
	} {
		out := help(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("webhookd %s does not say %q:\n%s", strings.Join(c.args, " "), w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("webhookd %s says %q, which it does not take:\n%s", strings.Join(c.args, " "), n, out)
			}
		}
	}
}

// TestUsageErrorsExitTwo: one rule for every command: a command line that
// cannot run (an unknown command or flag, a missing or bad argument, a bad
// variable, PostgreSQL not answering) prints why once on stderr, nothing on
// stdout, and exits 2. Every other case runs as the real binary.
func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	vars := map[string]string{"WEBHOOKD_DATABASE_URL": "postgres://postgres:S3cretPgPassword@" + closed + "/webhookd?sslmode=disable",
		"WEBHOOKD_API_URL": "http://" + closed, "WEBHOOKD_API_KEY": "whk_none"}
	for i, c := range []struct {
		args []string
		vars map[string]string
		says string
	}{
		{nil, nil, "no command given"},
		{[]string{"frobnicate"}, nil, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, nil, `unknown command "frobnicate"`},
		{[]string{"keys"}, nil, "usage: webhookd keys create"},
		{[]string{"secrets", "rotate"}, nil, "usage: webhookd secrets reseal"},
		{[]string{"serve", "--nope"}, nil, "unknown flag --nope\n"},
		{[]string{"serve", "-nope"}, nil, "unknown flag -nope\n"},
		{[]string{"keys", "list", "--worker-concurrency", "3"}, nil, "unknown flag --worker-concurrency\n"},
		{[]string{"all", "--project=x"}, nil, "unknown flag --project\n"},
		{[]string{"send", "--typo"}, nil, "unknown flag --typo\n"},
		{[]string{"send", "--type"}, nil, "--type needs a value"},
		{[]string{"send", "---type", "a"}, nil, "bad flag syntax: ---type"},
		{[]string{"serve", "--allow-private-networks=yes"}, nil, `--allow-private-networks: "yes" is not true or false`},
		{[]string{"worker", "-connect-timeout", "soon"}, nil, `-connect-timeout: "soon" is not a duration`},
		{[]string{"send", "--data", "1"}, nil, "--type is required"},
		{[]string{"send", "--type", "a"}, nil, "--data is required"},
		{[]string{"send", "--type", "a", "--data", "{not json"}, nil, "--data: not valid JSON"},
		{[]string{"send", "--type", "a", "--data", "1", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"listen"}, nil, "--forward-to is required"},
		{[]string{"listen", "--forward-to", "localhost:3000"}, nil, `--forward-to: want an http:// or https:// URL, got "localhost:3000"`},
		{[]string{"listen", "--forward-to", "http://localhost:3000", "--endpoint", "a b"}, nil, `--endpoint: want 1 to 64 characters`},
		{[]string{"keys", "create"}, nil, "--project is required"},
		{[]string{"keys", "create", "--project", "a", "--idempotency-ttl", "73h"}, nil, "--idempotency-ttl: must be between"},
		{[]string{"keys", "create", "--project", "a", "--rate-limit", "many"}, nil, `--rate-limit: "many" is not a whole number`},
		{[]string{"keys", "revoke"}, nil, "want KEY_PREFIX"},
		{[]string{"migrate", "now"}, nil, `unexpected argument "now"`},
		{[]string{"serve"}, map[string]string{"WEBHOOKD_CONNECT_TIMEOUT": "soon"}, `WEBHOOKD_CONNECT_TIMEOUT: "soon" is not a duration`},
		{[]string{"worker"}, map[string]string{"WEBHOOKD_ALLOW_PRIVATE_NETWORKS": "yes please"}, `WEBHOOKD_ALLOW_PRIVATE_NETWORKS: "yes please" is not true or false`},
		{[]string{"all"}, map[string]string{"WEBHOOKD_WORKER_CONCURRENCY": "lots"}, `WEBHOOKD_WORKER_CONCURRENCY: "lots" is not a whole number`},
		{[]string{"worker"}, map[string]string{"WEBHOOKD_ADMIN_TOKEN": "short"}, ""}, // not its setting: PostgreSQL is what stops it
		{[]string{"migrate"}, vars, "WEBHOOKD_DATABASE_URL: "},
		{[]string{"keys", "list", "--project", "a"}, vars, "WEBHOOKD_DATABASE_URL: "},
	} {
		env := map[string]string{"WEBHOOKD_DATABASE_URL": vars["WEBHOOKD_DATABASE_URL"]}
		for k, v := range c.vars {
			env[k] = v
		}
		run := cliRun
		if i%2 == 0 {
			run = func(vars map[string]string, args ...string) (string, string, int) {
				return webhookdCmd(t, vars, args...)
			}
		}
		out, errOut, code := run(env, c.args...)
		says := c.says
		if says == "" {
			says = "WEBHOOKD_DATABASE_URL: "
		}
		if code != 2 || out != "" || strings.Count(errOut, says) != 1 || strings.Contains(errOut, "S3cret") {
			t.Errorf("webhookd %s: exit %d, stdout %q, stderr %q; want exit 2 and %q once on stderr",
				strings.Join(c.args, " "), code, out, errOut, says)
		}
		checkErrorForm(t, c.args, errOut)
	}
}

// checkErrorForm: every error is written in one form, "webhookd: <command>:
// <what>" (only "webhookd: <what>" when no command was found), whatever
// kind it is: a usage error, a refusal, a bad variable, a database down.
func checkErrorForm(t *testing.T, args []string, stderr string) {
	t.Helper()
	if len(args) == 0 { // webhookd alone prints its usage, then the error
		_, stderr, _ = strings.Cut(stderr, "\nwebhookd: ")
		stderr = "webhookd: " + stderr
	}
	prefix := "webhookd: "
	switch {
	case len(args) == 0:
	case args[0] == "help":
		prefix += "help: "
	case len(args) > 1 && findCommand(args[0]+" "+args[1]) != nil:
		prefix += args[0] + " " + args[1] + ": "
	case findCommand(args[0]) != nil || group(args[0]) != nil:
		prefix += args[0] + ": "
	}
	if !strings.HasPrefix(stderr, prefix) {
		t.Errorf("webhookd %s: stderr %q; want it to begin %q", strings.Join(args, " "), stderr, prefix)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "webhookd ") {
			t.Errorf("webhookd %s: stderr line %q is not in the form webhookd: <command>: ...", strings.Join(args, " "), line)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres://u:pw@h:5432/d?sslmode=disable":                     "postgres://u:xxxxx@h:5432/d?sslmode=disable",
		"postgres://postgres@127.0.0.1/webhookd":                       "postgres://postgres@127.0.0.1/webhookd",
		"postgres://u@h/d?password=pw&sslmode=x":                       "postgres://u@h/d?password=xxxxx&sslmode=x",
		"redis://:pw@h:6379/0":                                         "redis://:xxxxx@h:6379/0",
		"redis://pw@h:6379/0":                                          "redis://xxxxx@h:6379/0",
		"rediss://h:6379/0?dial_timeout=1s":                            "rediss://h:6379/0?dial_timeout=1s",
		"redis-sentinel://:pw@a:1,b:2/0?master=m&sentinel_password=pw": "redis-sentinel://:xxxxx@a:1,b:2/0?master=m&sentinel_password=xxxxx",
		"host=h password=pw":                                           "",
	} {
		got, ok := redactURL(raw)
		if (want == "") == ok || got != want {
			t.Errorf("redactURL(%q) = %q, %v; want %q", raw, got, ok, want)
		}
	}
}

// TestReadmeListsEveryCommand: the README's Commands table has a row for
// every command webhookd help lists, and none for a command it lacks.
func TestReadmeListsEveryCommand(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Commands\n")
	section, _, _ = strings.Cut(section, "\n## ")
	inReadme := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		row, ok := strings.CutPrefix(line, "| `webhookd ")
		if !ok {
			continue
		}
		var name []string
		for _, w := range strings.Fields(row) {
			if !commandWord.MatchString(w) {
				break
			}
			name = append(name, strings.TrimSuffix(w, "`"))
		}
		inReadme[strings.Join(name, " ")] = true
	}
	for _, c := range commands {
		if !inReadme[c.name] {
			t.Errorf("README.md's Commands table has no row for webhookd %s", c.name)
		}
		delete(inReadme, c.name)
	}
	for name := range inReadme {
		t.Errorf("README.md's Commands table lists webhookd %s, which webhookd help does not", name)
	}
}

// commandWord is a word of a command's name as the README writes it.
var commandWord = regexp.MustCompile("^[a-z][a-z-]*`?$")
