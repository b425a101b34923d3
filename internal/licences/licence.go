// Package licences finds the licences of what webhookd is built from — the
// Go modules its packages, tests and tools import, and the npm packages the
// Node SDK is built with — and says whether each is compatible with the
// Apache License 2.0 that webhookd is released under (SPEC §7).
//
// It reads what the build already has: Go modules' licence files in the
// module cache (go list names the modules and their directories; the build
// fills the cache), and the "license" field of each package in
// sdks/node/package-lock.json. A licence text is classified by the
// sentences that make it what it is, not by a library: the list of licences
// it knows is short on purpose, and any text it does not recognise fails
// the check until someone reads it and teaches this package.
//
// TestDependencyLicences (make licences) is the check.
package licences

import (
	"regexp"
	"strings"
)

// Verdict says whether a licence lets webhookd ship what it covers under
// Apache-2.0, and what to keep in mind.
type Verdict struct {
	Allowed bool
	Note    string // why not, or a condition that comes with it
}

// known lists the licences this package can name, by SPDX identifier, with
// their verdicts. Everything else — the GPL family, UNLICENSED, a text not
// recognised — is refused.
var known = map[string]Verdict{
	"Apache-2.0":   {Allowed: true},
	"MIT":          {Allowed: true},
	"BSD-2-Clause": {Allowed: true},
	"BSD-3-Clause": {Allowed: true},
	"ISC":          {Allowed: true},
	"0BSD":         {Allowed: true},
	"Unlicense":    {Allowed: true},
	"CC0-1.0":      {Allowed: true},
	// Weak copyleft, file by file: the MPL's files may be used unmodified in
	// an Apache-2.0 work; a change to one of them must be published under the
	// MPL, and its source offered to whoever gets the binary.
	"MPL-2.0": {Allowed: true, Note: "weak copyleft, file-level: changes to its files stay MPL-2.0 and their source must be offered"},
	"GPL":     {Note: "strong copyleft: the whole work would have to be GPL"},
	"AGPL":    {Note: "strong copyleft, network use included"},
	"LGPL":    {Note: "copyleft on the library, with relinking duties a static Go binary cannot meet"},
}

// Check returns the verdict on one SPDX identifier; an unknown one is
// refused.
func Check(id string) Verdict {
	if v, ok := known[canonical(id)]; ok {
		return v
	}
	switch {
	case id == "":
		return Verdict{Note: "no licence found"}
	case strings.EqualFold(id, "UNLICENSED"):
		return Verdict{Note: "UNLICENSED: all rights reserved"}
	}
	return Verdict{Note: "not a licence this check knows: read it, and teach internal/licences if it is fine"}
}

// canonical maps an SPDX identifier to the spelling of known, or to the
// family of a GNU licence (GPL-2.0-only, LGPL-3.0-or-later, ...).
func canonical(id string) string {
	id = strings.TrimSuffix(id, "+")
	for k := range known {
		if strings.EqualFold(k, id) {
			return k
		}
	}
	up := strings.ToUpper(id)
	for _, family := range []string{"AGPL", "LGPL", "GPL"} {
		if strings.HasPrefix(up, family+"-") || up == family {
			return family
		}
	}
	return id
}

// nonWord is what normalize turns into single spaces.
var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// normalize lowercases a licence text and keeps only its words, so that
// line breaks, comment markers and punctuation do not matter.
func normalize(s string) string {
	return " " + strings.TrimSpace(nonWord.ReplaceAllString(strings.ToLower(s), " ")) + " "
}

// Classify names the licences a licence file's text grants, by SPDX
// identifier (the GNU ones by family: GPL, LGPL, AGPL), in the order of
// known's checks. A file that grants two (yaml's: MIT for some files,
// Apache-2.0 for others) names both; one it does not recognise names none.
func Classify(text string) []string {
	t := normalize(text)
	has := func(phrases ...string) bool {
		for _, p := range phrases {
			if !strings.Contains(t, normalize(p)) {
				return false
			}
		}
		return true
	}
	var ids []string
	add := func(id string) { ids = append(ids, id) }
	if has("Apache License", "Version 2.0") {
		add("Apache-2.0")
	}
	if has("Permission is hereby granted, free of charge, to any person obtaining a copy") {
		add("MIT")
	}
	if has("Redistribution and use in source and binary forms") {
		switch {
		case has("all advertising materials mentioning features"):
			add("BSD-4-Clause") // not in known: refused
		case has("endorse or promote products derived from this software"):
			add("BSD-3-Clause")
		default:
			add("BSD-2-Clause")
		}
	}
	if has("Permission to use, copy, modify, and/or distribute this software for any purpose with or without fee is hereby granted") ||
		has("Permission to use, copy, modify, and distribute this software for any purpose with or without fee is hereby granted") {
		if has("provided that the above copyright notice and this permission notice appear in all copies") {
			add("ISC")
		} else {
			add("0BSD")
		}
	}
	if has("This is free and unencumbered software released into the public domain") {
		add("Unlicense")
	}
	if has("CC0 1.0 Universal") {
		add("CC0-1.0")
	}
	mpl := has("Mozilla Public License", "Version 2.0") || has("Mozilla Public License, v. 2.0")
	if mpl {
		add("MPL-2.0")
	}
	// The MPL's own text names the GNU licences (as "Secondary Licenses"),
	// and the LGPL's names the GPL: look for those only where they are the
	// licence itself.
	switch {
	case mpl:
	case has("GNU Affero General Public License"):
		add("AGPL")
	case has("GNU Lesser General Public License"), has("GNU Library General Public License"):
		add("LGPL")
	case has("GNU General Public License"):
		add("GPL")
	}
	return ids
}
