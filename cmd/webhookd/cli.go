package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// command is one webhookd command: what its help says, the settings and
// flags it takes, and what runs it. The command list, each command's -h
// and the parsing of its command line all come from the commands table.
type command struct {
	name    string // as typed after webhookd: "keys create"
	args    string // what follows the name in its synopsis
	summary string // its line in the command list
	about   string // more for its own help, when there is more to say
	nargs   [2]int // how many positional arguments, at least and at most
	// settings names the Config settings it reads, by flag name; each is a
	// flag and an environment variable.
	settings []string
	// setup defines the command's own flags and returns what runs it.
	setup func(f *flagSet) action
}

// action runs a command once its command line is parsed.
type action func(ctx context.Context, inv *invocation) error

// invocation is what a command runs with.
type invocation struct {
	cfg            Config
	args           []string // the positional arguments
	getenv         func(string) string
	stdout, stderr io.Writer
}

// Settings of the commands that only reach PostgreSQL, and of the
// processes.
var (
	dbSettings  = []string{"database-url", "log-level", "log-format"}
	apiSettings = []string{"database-url", "database-max-conns", "redis-url", "api-addr", "dashboard-addr", "admin-token",
		"encryption-key", "allow-private-networks", "connect-timeout", "response-timeout", "max-payload-bytes",
		"max-batch-bytes", "trusted-proxies", "request-timeout", "drain-timeout", "portal-base-url", "portal-frame-ancestors",
		"transform-timeout", "log-level", "log-format"}
	workerSettings = []string{"database-url", "database-max-conns", "redis-url", "dashboard-addr", "encryption-key",
		"allow-private-networks", "retry-schedule", "connect-timeout", "response-timeout", "retention",
		"worker-concurrency", "endpoint-initial-limit", "circuit-after", "circuit-probes", "endpoint-disable-after",
		"reconcile-interval", "transform-timeout", "drain-timeout", "outbox-sources", "archive-dir", "log-level", "log-format"}
	allSettings = func() []string {
		var all []string
		for _, s := range settings {
			all = append(all, s.flag)
		}
		return all
	}()
)

// tracingAbout is what the help of the processes says of tracing, which
// the standard OTEL_* variables configure rather than a flag.
const tracingAbout = "Tracing (OpenTelemetry, OTLP over HTTP) is on when OTEL_EXPORTER_OTLP_ENDPOINT,\n" +
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER=otlp is set; the other standard OTEL_*\n" +
	"variables apply (README.md, Tracing)."

// commands is every command, in the order help lists them.
var commands = []*command{
	{name: "all", about: tracingAbout, summary: "API, worker and dashboard in one process",
		settings: allSettings, setup: serveAs(Roles{API: true, Worker: true, Ops: true})},
	{name: "serve", about: tracingAbout, summary: "the public API, and the dashboard with /healthz, /readyz and /metrics",
		settings: apiSettings, setup: serveAs(Roles{API: true, Ops: true})},
	{name: "worker", about: tracingAbout, summary: "deliveries, retries, the reconciler, background jobs and the outbox relay\n(/healthz, /readyz and /metrics on WEBHOOKD_DASHBOARD_ADDR)",
		settings: workerSettings, setup: serveAs(Roles{Worker: true, Ops: true, NoDashboard: true})},
	{name: "migrate", summary: "apply the database migrations (safe to rerun)",
		settings: dbSettings, setup: func(*flagSet) action { return runMigrate }},
	{name: "keys create", args: "--project NAME [--rate-limit N] [--idempotency-ttl D]",
		summary:  "create an API key (and the project if new); prints the key alone",
		about:    "Given for a project that exists, --rate-limit and --idempotency-ttl change its plan.",
		settings: dbSettings, setup: keysCreate},
	{name: "keys list", args: "--project NAME",
		summary:  "the project's keys: id, prefix, created, revoked",
		settings: dbSettings, setup: keysList},
	{name: "keys revoke", args: "KEY_PREFIX|KEY_ID|KEY", nargs: [2]int{1, 1},
		summary: "revoke the one key with that prefix (or id, or the whole key);\nit gets 401 on every API process",
		about: "KEY_PREFIX is the key's first 8 characters (whk_ and 4 more), as `webhookd keys list` shows it;\n" +
			"if two keys that still work share it, give the key's id (key_...). Revoking a revoked key says\n" +
			"when it was revoked and exits 0; a key that matches nothing exits 1 and changes nothing.",
		settings: append(slices.Clone(dbSettings), "redis-url"), setup: keysRevoke},
	{name: "outbox init", args: "--database-url URL",
		summary: "create the table webhookd_outbox (and its trigger) in a service's database,\nfor WEBHOOKD_OUTBOX_SOURCES (safe to rerun)",
		about: "--database-url names the service's database, not webhookd's: it is required, and never taken from\n" +
			"WEBHOOKD_DATABASE_URL. The table is made in the first schema of the connection's search_path.\n" +
			"README.md, Outbox, documents its columns (contract version 1) and webhookd_outbox_refused, where\n" +
			"refused rows go.",
		settings: []string{"log-level", "log-format"}, setup: outboxInit},
	{name: "portal-link", args: "--project NAME [--ttl 1h]",
		summary:  "print a one-time link into the integrators' portal for a project",
		about:    "The link points at WEBHOOKD_PORTAL_BASE_URL (or the dashboard's address); opening it spends it.",
		settings: []string{"database-url", "dashboard-addr", "portal-base-url", "log-level", "log-format"}, setup: portalLink},
	{name: "secrets reseal",
		summary:  "encrypt every endpoint secret and stored response with the first key\nof WEBHOOKD_ENCRYPTION_KEY (after turning it on, or rotating)",
		settings: []string{"database-url", "encryption-key", "log-level", "log-format"},
		setup:    func(*flagSet) action { return runSecretsReseal }},
	{name: "send", args: "--type T --data JSON|@file.json|@- [--external-id X] [--endpoint ID]... [--idempotency-key K]",
		summary: "post one event through the API (WEBHOOKD_API_URL, WEBHOOKD_API_KEY);\nprints the event id alone",
		about: "A refused request prints the API's error code and message on stderr and exits 1; retries are safe:\n" +
			"every try of one run sends the same Idempotency-Key. An --external-id sent before is the same event:\n" +
			"send prints that event's id, says on stderr that nothing new was sent, and exits 0.",
		setup: sendSetup},
	{name: "archive list",
		summary: "the archives in WEBHOOKD_ARCHIVE_DIR: range, rows, size, and whether each verifies\n(exit 1 when one does not)",
		about: "Each archive is checked against its manifest: every file's size, SHA-256 and row count. Archives\n" +
			"are written by the retention job before it drops history; nothing here needs the database.",
		settings: archiveSettings, setup: archiveList},
	{name: "archive show", args: "DELIVERY_ID|DEAD_LETTER_ID", nargs: [2]int{1, 1},
		summary: "an archived delivery (by its id or its dead letter's) with its event, attempts and\ndead letter, as JSON, from the archive alone",
		about: "It reads the archive whose range holds the id's time first, then the others. An id no archive\n" +
			"holds exits 1; an id that is neither dlv_... nor dl_... exits 2.",
		settings: archiveSettings, setup: archiveShow},
	{name: "archive replay", args: "DEAD_LETTER_ID", nargs: [2]int{1, 1},
		summary: "send an archived dead letter's event again to its endpoint, as a new event through the API\n(WEBHOOKD_API_URL, WEBHOOKD_API_KEY); prints the new event and delivery",
		about: "The event's type and data go to POST /v1/events with endpoint_ids [the endpoint] and the\n" +
			"Idempotency-Key archive-replay-DEAD_LETTER_ID, so a second run sends nothing new (within the\n" +
			"project's idempotency TTL). An endpoint that no longer exists or is disabled exits 1, nothing sent.",
		settings: archiveSettings, setup: archiveReplaySetup},
	{name: "listen", args: "--forward-to URL [--endpoint NAME] [--events TYPE,...]",
		summary: "forward the deliveries of the relay endpoint relay://NAME to a local URL\n(WEBHOOKD_API_URL, WEBHOOKD_API_KEY); one line per delivery",
		about: "It makes the endpoint relay://NAME (NAME defaults to listen) or reuses it, subscribed to --events\n" +
			"(every type by default), and keeps a stream open to the API: each delivery arrives signed as for an\n" +
			"HTTP endpoint, goes to --forward-to with its headers, and the local answer is recorded as the attempt.\n" +
			"While no listen runs, the relay's deliveries wait without spending attempts. It connects again with\n" +
			"backoff when the stream drops, and exits 0 on SIGINT or SIGTERM.",
		setup: listenSetup},
}

// findCommand returns the command named name, or nil.
func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// group returns the commands under a group name ("keys"), if it is one.
func group(name string) []*command {
	var out []*command
	for _, c := range commands {
		if g, _, ok := strings.Cut(c.name, " "); ok && g == name {
			out = append(out, c)
		}
	}
	return out
}

// commandError is what went wrong in one command: report prints it
// "webhookd: <command>: <what>", the one form of every error.
type commandError struct {
	cmd string
	err error
}

func (e commandError) Error() string { return e.cmd + ": " + e.err.Error() }
func (e commandError) Unwrap() error { return e.err }

// usageError is a command line that cannot run as given: main prints it
// with where to find the command's usage, and exits 2.
type usageError struct {
	cmd string // the command, or "" for webhookd itself
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// refusedError is a command refused for a reason its message gives (no
// such key, say): main prints it and exits 1.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

// exitCode is the one rule for every command: 0 done (help included), 1
// refused (the reason is on stderr), 2 a usage or start-up error (a bad
// flag, argument or variable, PostgreSQL unreachable).
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(refusedError)):
		return 1
	default:
		return 2
	}
}

// report prints err on stderr, once, in one form for every command:
// "webhookd: <command>: <what>" (or "webhookd: <what>" when no command was
// found), and for a usage error where to find the usage.
func report(err error, stderr io.Writer) {
	if err == nil {
		return
	}
	fmt.Fprintf(stderr, "webhookd: %v\n", err)
	prefix := "webhookd: "
	var ce commandError
	if errors.As(err, &ce) {
		prefix += ce.cmd + ": "
	}
	var ue usageError
	if errors.As(err, &ue) {
		help := "webhookd help"
		if ue.cmd != "" {
			help = "webhookd " + ue.cmd + " -h"
		}
		fmt.Fprintf(stderr, "Run `%s` for usage.\n", help)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		fmt.Fprintln(stderr, prefix+"the database has no webhookd tables yet: run `webhookd migrate` first")
	}
}

// cli runs one command line and returns the process's exit code, having
// said on stderr what went wrong.
func cli(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := run(ctx, args, getenv, stdout, stderr)
	report(err, stderr)
	return exitCode(err)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// run executes one command line.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usageError{err: errors.New("no command given")}
	}
	if isHelp(args[0]) {
		return help(args[1:], getenv, stdout)
	}
	name, rest := args[0], args[1:]
	if sub := group(name); sub != nil {
		switch {
		case len(rest) > 0 && isHelp(rest[0]):
			printGroup(stdout, name, sub)
			return nil
		case len(rest) == 0 || findCommand(name+" "+rest[0]) == nil:
			return commandError{name, usageError{cmd: name, err: errors.New(groupSynopsis(sub))}}
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	c := findCommand(name)
	if c == nil {
		return usageError{err: fmt.Errorf("unknown command %q", name)}
	}
	if err := c.exec(ctx, rest, getenv, stdout, stderr); err != nil {
		return commandError{c.name, err}
	}
	return nil
}

// help prints the usage of webhookd, or of the command named by args.
func help(args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		printUsage(stdout)
		return nil
	}
	name := strings.Join(args, " ")
	if sub := group(name); sub != nil {
		printGroup(stdout, name, sub)
		return nil
	}
	c := findCommand(name)
	if c == nil {
		return usageError{err: fmt.Errorf("help: unknown command %q", name)}
	}
	f := newFlagSet(c.name, getenv)
	c.define(f)
	c.printHelp(stdout, f)
	return nil
}

// define defines c's flags and settings on f and returns what runs it.
func (c *command) define(f *flagSet) (action, *Config) {
	cfg := DefaultConfig()
	act := c.setup(f)
	cfg.bind(f, c.settings)
	return act, &cfg
}

// exec parses c's command line and runs it.
func (c *command) exec(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlagSet(c.name, getenv)
	act, cfg := c.define(f)
	positional, err := f.parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(stdout, f)
		return nil
	case err != nil:
		return usageError{cmd: c.name, err: err}
	case len(positional) < c.nargs[0]:
		return usageError{cmd: c.name, err: fmt.Errorf("want %s", c.args)}
	case len(positional) > c.nargs[1]:
		return usageError{cmd: c.name, err: fmt.Errorf("unexpected argument %q", positional[c.nargs[1]])}
	}
	if err := f.envErr(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return act(ctx, &invocation{cfg: *cfg, args: positional, getenv: getenv, stdout: stdout, stderr: stderr})
}

// synopsis is the command's usage line.
func (c *command) synopsis() string {
	s := "webhookd " + c.name
	if c.args != "" {
		s += " " + c.args
	}
	return s + " [flags]"
}

func (c *command) printHelp(w io.Writer, f *flagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", c.synopsis(), sentence(c.summary))
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	f.printFlags(w)
}

// sentence makes a summary, lines and all, one paragraph with a capital.
func sentence(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ToUpper(s[:1]) + s[1:]
}

// groupSynopsis lists the usage lines of a group's commands.
func groupSynopsis(sub []*command) string {
	lines := make([]string, len(sub))
	for i, c := range sub {
		lines[i] = c.synopsis()
	}
	return "usage: " + strings.Join(lines, "\n       ")
}

func printGroup(w io.Writer, name string, sub []*command) {
	fmt.Fprintf(w, "Usage: webhookd %s COMMAND [flags]\n\nCommands:\n", name)
	printCommands(w, sub)
	fmt.Fprintf(w, "\nRun `webhookd %s COMMAND -h` for what a command takes.\n", name)
}

func printCommands(w io.Writer, list []*command) {
	for _, c := range list {
		head := "  webhookd " + c.name
		if c.args != "" {
			head += " " + c.args
		}
		fmt.Fprintln(w, head)
		for _, line := range strings.Split(c.summary, "\n") {
			fmt.Fprintf(w, "        %s\n", line)
		}
	}
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "webhookd — durable webhook delivery\n\nUsage: webhookd COMMAND [flags]\n\nCommands:\n")
	printCommands(w, commands)
	fmt.Fprint(w, `  webhookd help [COMMAND]
        this list, or what a command takes (as webhookd COMMAND -h)

Every setting is a flag and a WEBHOOKD_* environment variable (see README.md);
"webhookd COMMAND -h" lists those of a command and never shows a secret's value.
Exit status: 0 done, 1 refused (the reason on stderr), 2 a usage or start-up error.
`)
}
