package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// secrecy says how much of a setting's value help may show.
type secrecy int

const (
	plain     secrecy = iota // shown as it is
	secretURL                // shown with its password (and secret query parameters) masked
	secret                   // never shown: help says whether it is set
)

// flagSet is one command's flags: a flag.FlagSet that also knows which
// flags stand for an environment variable, and whether their values may be
// shown, so that help can say where a value comes from without printing a
// secret. Bad environment values are kept until the command line is
// parsed, so that -h works whatever the environment holds.
type flagSet struct {
	fs     *flag.FlagSet
	getenv func(string) string
	env    map[string]envVar // by flag name, for the flags a variable stands for
	order  []string          // flag names in the order they were defined
	errs   []error
}

// envVar is the environment variable behind a flag, and what it held.
type envVar struct {
	name    string // WEBHOOKD_...
	value   string // what the environment held; "" when unset
	secrecy secrecy
}

func newFlagSet(name string, getenv func(string) string) *flagSet {
	fs := flag.NewFlagSet("webhookd "+name, flag.ContinueOnError)
	// The caller reports parse errors once, and prints help itself.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs, getenv: getenv, env: map[string]envVar{}}
}

// define records a flag just defined on f.fs, and when env names a
// variable that is set, takes the flag's value from it.
func (f *flagSet) define(name, env string, s secrecy) {
	f.order = append(f.order, name)
	if env == "" {
		return
	}
	v := f.getenv(env)
	f.env[name] = envVar{name: env, value: v, secrecy: s}
	if v == "" {
		return
	}
	value := f.fs.Lookup(name).Value
	if err := value.Set(v); err != nil {
		f.errs = append(f.errs, badValue(env, v, value, s))
	}
}

// badValue says that v, given as what (a variable, or a flag as typed), is
// not what value takes; a secret's v is not repeated.
func badValue(what, v string, value flag.Value, s secrecy) error {
	want := "a valid value"
	if g, ok := value.(flag.Getter); ok {
		switch g.Get().(type) {
		case int, int64:
			want = "a whole number"
		case time.Duration:
			want = "a duration such as 30s or 2m"
		case bool:
			want = "true or false"
		}
	}
	if s == plain {
		return fmt.Errorf("%s: %q is not %s", what, v, want)
	}
	return fmt.Errorf("%s: not %s", what, want)
}

// String, Int, Int64, Duration, Bool and Var define flags as the flag
// package's methods of those names do; env, when not "", names the
// variable that sets the flag's value when the command line does not.
// Put the placeholder of the value in backquotes in usage ("`URL`").
func (f *flagSet) String(p *string, name, env string, s secrecy, usage string) {
	f.fs.StringVar(p, name, *p, usage)
	f.define(name, env, s)
}

func (f *flagSet) Int(p *int, name, env, usage string) {
	f.fs.IntVar(p, name, *p, usage)
	f.define(name, env, plain)
}

func (f *flagSet) Int64(p *int64, name, env, usage string) {
	f.fs.Int64Var(p, name, *p, usage)
	f.define(name, env, plain)
}

func (f *flagSet) Duration(p *time.Duration, name, env, usage string) {
	f.fs.DurationVar(p, name, *p, usage)
	f.define(name, env, plain)
}

func (f *flagSet) Bool(p *bool, name, env, usage string) {
	f.fs.BoolVar(p, name, *p, usage)
	f.define(name, env, plain)
}

func (f *flagSet) Var(v flag.Value, name, usage string) {
	f.fs.Var(v, name, usage)
	f.define(name, "", plain)
}

// parse parses the command line; flags may come before and after the
// positional arguments, which it returns ("--" ends the flags). A flag is
// -name or --name, its value the next argument or after "=" (a true or
// false flag takes only "="). An error is flag.ErrHelp for -h, -help or
// --help, or says what is wrong with a flag, naming it as it was typed: the
// flag package's own messages would write --typo as -typo.
func (f *flagSet) parse(args []string) ([]string, error) {
	var positional []string
	for len(args) > 0 {
		arg := args[0]
		args = args[1:]
		switch {
		case arg == "--":
			return append(positional, args...), nil
		case len(arg) < 2 || arg[0] != '-':
			positional = append(positional, arg)
			continue
		}
		dashes := "-"
		if strings.HasPrefix(arg, "--") {
			dashes = "--"
		}
		name, value, hasValue := strings.Cut(arg[len(dashes):], "=")
		typed := dashes + name
		if name == "" || name[0] == '-' {
			return nil, fmt.Errorf("bad flag syntax: %s", arg)
		}
		fl := f.fs.Lookup(name)
		if fl == nil {
			if name == "h" || name == "help" {
				return nil, flag.ErrHelp
			}
			return nil, fmt.Errorf("unknown flag %s", typed)
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if len(args) == 0 {
				return nil, fmt.Errorf("%s needs a value", typed)
			}
			value, args = args[0], args[1:]
		}
		if err := f.fs.Set(name, value); err != nil {
			return nil, badValue(typed, value, fl.Value, f.env[name].secrecy)
		}
	}
	return positional, nil
}

// envErr reports the environment values that could not be used.
func (f *flagSet) envErr() error { return errors.Join(f.errs...) }

// printFlags writes the help of f's flags: those of the command itself
// under "Flags:", those that an environment variable also sets under
// "Settings". A secret's value is never printed, only whether it is set.
func (f *flagSet) printFlags(w io.Writer) {
	var own, settings []string
	for _, name := range f.order {
		if _, ok := f.env[name]; ok {
			settings = append(settings, name)
		} else {
			own = append(own, name)
		}
	}
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, name := range own {
			f.printFlag(w, name)
		}
	}
	if len(settings) > 0 {
		fmt.Fprintln(w, "\nSettings (a flag, or its environment variable):")
		for _, name := range settings {
			f.printFlag(w, name)
		}
	}
}

func (f *flagSet) printFlag(w io.Writer, name string) {
	fl := f.fs.Lookup(name)
	placeholder, usage := flag.UnquoteUsage(fl)
	if _, isBool := fl.Value.(interface{ IsBoolFlag() bool }); isBool {
		placeholder = ""
	}
	if placeholder != "" {
		// A placeholder alone in parentheses ("(`N`)") only names the value.
		usage = strings.Replace(usage, " ("+placeholder+")", "", 1)
		placeholder = " " + placeholder
	}
	fmt.Fprintf(w, "  --%s%s\n", name, placeholder)
	def := fl.DefValue
	if def == "0" || def == "0s" || def == "false" {
		def = ""
	}
	e, ok := f.env[name]
	switch {
	case !ok && def != "":
		usage += " (default " + def + ")"
	case !ok:
	case e.value == "" && def != "":
		usage += " (" + e.name + "; default " + def + ")"
	case e.value == "":
		usage += " (" + e.name + ")"
	default:
		usage += " (" + e.name + ": " + shown(e) + ")"
	}
	fmt.Fprintf(w, "        %s\n", strings.ReplaceAll(usage, "\n", "\n        "))
}

// shown is what help says of a variable that is set.
func shown(e envVar) string {
	switch e.secrecy {
	case plain:
		return fmt.Sprintf("%q from the environment", e.value)
	case secretURL:
		if u, ok := redactURL(e.value); ok {
			return fmt.Sprintf("%q from the environment", u)
		}
	}
	return "set in the environment, value not shown"
}

// secretParam matches the query parameters of a URL that carry a secret
// (password=, sentinel_password=, sslkey=, ...).
var secretParam = regexp.MustCompile(`(?i)pass|secret|token|key`)

// redactURL returns u with its password and secret query parameters
// masked, or false when u is not a URL it can say that of for sure
// (keyword=value strings, several hosts, anything that does not parse).
func redactURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || strings.ContainsAny(raw, " \t\n") {
		return "", false
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else if u.User != nil && u.Scheme != "postgres" && u.Scheme != "postgresql" {
		u.User = url.User("xxxxx") // a lone user part may be a password (Redis)
	}
	q := u.Query()
	for k := range q {
		if secretParam.MatchString(k) {
			q.Set(k, "xxxxx")
		}
	}
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String(), true
}
