package licences

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"text/tabwriter"
	"time"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// TestDependencyLicences is the check (make licences; make test runs it
// too): it lists the licence of every Go module the build, the tests and
// the tools use and of every npm package the Node SDK is built with, and
// fails on each one that is not compatible with Apache-2.0, or that it
// cannot tell. go test -v shows the list.
func TestDependencyLicences(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	goDeps, err := GoModules(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	npmDeps, err := NPMPackages(filepath.Join(root, "sdks/node/package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Guard against a check that passes because it found nothing.
	names := map[string]bool{}
	for _, d := range append(slices.Clone(goDeps), npmDeps...) {
		names[d.Kind+" "+d.Name] = true
	}
	for _, want := range []string{"go github.com/jackc/pgx/v5", "go github.com/hibiken/asynq", "go github.com/a-h/templ",
		"go golang.org/x/tools", "npm typescript"} {
		if !names[want] {
			t.Errorf("the list has no %s: go list or the lockfile was not read as it should be", want)
		}
	}

	var list bytes.Buffer
	tw := tabwriter.NewWriter(&list, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tVERSION\tLICENCE\tNOTE")
	for _, d := range append(goDeps, npmDeps...) {
		note := d.Verdict.Note
		if !d.Verdict.Allowed {
			note = "REFUSED: " + note
			t.Errorf("%s %s %s: licence %q is not compatible with Apache-2.0: %s", d.Kind, d.Name, d.Version, d.Licences, d.Verdict.Note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Kind, d.Name, d.Version, d.Licences, note)
	}
	tw.Flush()
	t.Logf("%d Go modules, %d npm packages:\n%s", len(goDeps), len(npmDeps), list.String())
}

// TestProjectLicence: webhookd's own LICENSE is Apache-2.0, each SDK ships
// the same file, and each SDK's metadata says Apache-2.0.
func TestProjectLicence(t *testing.T) {
	t.Parallel()
	licence, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := Classify(string(licence)); !slices.Equal(ids, []string{"Apache-2.0"}) {
		t.Errorf("LICENSE is %v; want Apache-2.0", ids)
	}
	for _, sdk := range []string{"node", "php", "python"} {
		if b, err := os.ReadFile(filepath.Join(root, "sdks", sdk, "LICENSE")); err != nil || !bytes.Equal(b, licence) {
			t.Errorf("sdks/%s/LICENSE differs from LICENSE (%v): copy it again", sdk, err)
		}
	}
	jsonLicense := func(path string, pointer func(map[string]any) any) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := pointer(m); got != "Apache-2.0" {
			t.Errorf("%s says license %v; want Apache-2.0", path, got)
		}
	}
	top := func(m map[string]any) any { return m["license"] }
	jsonLicense("sdks/node/package.json", top)
	jsonLicense("sdks/node/package-lock.json", func(m map[string]any) any {
		root, _ := m["packages"].(map[string]any)[""].(map[string]any)
		return root["license"]
	})
	jsonLicense("sdks/php/composer.json", top)
	pyproject, err := os.ReadFile(filepath.Join(root, "sdks/python/pyproject.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^license = \{text = "Apache-2.0"\}$`).Match(pyproject) {
		t.Errorf(`sdks/python/pyproject.toml has no line license = {text = "Apache-2.0"}`)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	const (
		mit = `Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal`
		bsd = `Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:`
		bsd3 = bsd + `
   * Neither the name of Google Inc. nor the names of its
contributors may be used to endorse or promote products derived from
this software without specific prior written permission.`
		isc = `Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted`
		iscNotice = `, provided that the above copyright notice and this permission notice appear in all copies.`
		apache    = "                                 Apache License\n                           Version 2.0, January 2004"
		mpl       = "Mozilla Public License Version 2.0\n==================================\n" +
			`"Secondary License" means either the GNU General Public License, Version 2.0, the GNU Lesser General
Public License, Version 2.1, the GNU Affero General Public License, Version 3.0, or any later versions`
	)
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"MIT", "MIT License\n\nCopyright (c) 2019 Someone\n\n" + mit, []string{"MIT"}},
		{"MIT in a Go comment", "// " + mit, []string{"MIT"}},
		{"BSD-3-Clause", "Copyright (c) 2009 The Go Authors. All rights reserved.\n\n" + bsd3, []string{"BSD-3-Clause"}},
		{"BSD-2-Clause", bsd, []string{"BSD-2-Clause"}},
		{"BSD-4-Clause", bsd3 + "\n3. All advertising materials mentioning features or use of this software", []string{"BSD-4-Clause"}},
		{"Apache-2.0", apache, []string{"Apache-2.0"}},
		{"Apache-2.0 header", `Licensed under the Apache License, Version 2.0 (the "License");`, []string{"Apache-2.0"}},
		{"MIT and Apache-2.0 (yaml)", "This project is covered by two different licenses: MIT and Apache.\n\n" + mit +
			"\n\nLicensed under the Apache License, Version 2.0", []string{"Apache-2.0", "MIT"}},
		{"ISC", isc + iscNotice, []string{"ISC"}},
		{"0BSD", isc + ".", []string{"0BSD"}},
		{"Unlicense", "This is free and unencumbered software released into the public domain.", []string{"Unlicense"}},
		{"CC0-1.0", "Creative Commons Legal Code\n\nCC0 1.0 Universal", []string{"CC0-1.0"}},
		{"MPL-2.0 names GNU licences without being one", mpl, []string{"MPL-2.0"}},
		{"MPL-2.0 header", "This Source Code Form is subject to the terms of the Mozilla Public\nLicense, v. 2.0.", []string{"MPL-2.0"}},
		{"GPL", "                    GNU GENERAL PUBLIC LICENSE\n                       Version 3, 29 June 2007", []string{"GPL"}},
		{"LGPL", "GNU LESSER GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n... the GNU General Public License ...", []string{"LGPL"}},
		{"AGPL", "GNU AFFERO GENERAL PUBLIC LICENSE\nVersion 3, 19 November 2007", []string{"AGPL"}},
		{"unknown", "All rights reserved. Ask us first.", nil},
	} {
		if got := Classify(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s: Classify = %v; want %v", c.name, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for expr, allowed := range map[string]bool{
		"MIT":                                    true,
		"Apache-2.0":                             true,
		"apache-2.0":                             true,
		"BSD-3-Clause":                           true,
		"ISC":                                    true,
		"0BSD":                                   true,
		"Unlicense":                              true,
		"CC0-1.0":                                true,
		"MPL-2.0":                                true,
		"(MIT OR Apache-2.0)":                    true,
		"MIT OR GPL-3.0-or-later":                true,
		"GPL-2.0-only OR (MIT AND BSD-2-Clause)": true,
		"MIT AND CC0-1.0":                        true,
		"Apache-2.0 WITH LLVM-exception":         true,
		"MIT AND GPL-3.0-only":                   false,
		"GPL-2.0":                                false,
		"GPL-2.0+":                               false,
		"LGPL-2.1-or-later":                      false,
		"AGPL-3.0-only":                          false,
		"GPL-2.0-only WITH Classpath-exception-2.0": false,
		"UNLICENSED":                   false,
		"SEE LICENSE IN LICENSE.txt":   false,
		"BSD-4-Clause":                 false,
		"":                             false,
		"(MIT":                         false,
		"MIT OR":                       false,
		"WTFPL":                        false,
		"MIT WITH":                     false,
		"(MIT OR Apache-2.0) AND ISC)": false,
	} {
		if got := CheckExpression(expr); got.Allowed != allowed {
			t.Errorf("CheckExpression(%q) = %+v; want allowed %v", expr, got, allowed)
		}
	}
	if v := CheckExpression("MIT AND MPL-2.0"); !v.Allowed || v.Note == "" {
		t.Errorf("MIT AND MPL-2.0: %+v; want allowed, with the MPL's condition as its note", v)
	}
}

// TestRefusals: what the check refuses, on files as the module cache and a
// lockfile hold them.
func TestRefusals(t *testing.T) {
	t.Parallel()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write(filepath.Join(dir, "gpl/COPYING"), "GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991")
	write(filepath.Join(dir, "gpl/LICENSE-MIT"), "Permission is hereby granted, free of charge, to any person obtaining a copy")
	write(filepath.Join(dir, "none/README.md"), "MIT")
	write(filepath.Join(dir, "odd/LICENSE.txt"), "Do what you like, but ask first.")
	write(filepath.Join(dir, "mit/LICENSE.md"), "Permission is hereby granted, free of charge, to any person obtaining a copy")
	for sub, allowed := range map[string]bool{"gpl": false, "none": false, "odd": false, "mit": true} {
		ids, v, err := dirLicences(filepath.Join(dir, sub))
		if err != nil || v.Allowed != allowed || (!allowed && v.Note == "") {
			t.Errorf("module %s: %v %+v (%v); want allowed %v, or a note saying why not", sub, ids, v, err, allowed)
		}
	}

	write(filepath.Join(dir, "npm/package-lock.json"), `{"lockfileVersion": 3, "packages": {
		"": {"name": "x", "license": "Apache-2.0"},
		"node_modules/ok": {"version": "1.0.0", "license": "(MIT OR GPL-3.0)"},
		"node_modules/ok/node_modules/gpl": {"version": "2.0.0", "license": "GPL-3.0-only"},
		"node_modules/old": {"version": "0.1.0", "license": {"type": "MIT"}},
		"node_modules/installed": {"version": "1.0.0"},
		"node_modules/missing": {"version": "1.0.0"},
		"node_modules/linked": {"resolved": "../linked", "link": true}}}`)
	write(filepath.Join(dir, "npm/node_modules/installed/package.json"), `{"license": "ISC"}`)
	deps, err := NPMPackages(filepath.Join(dir, "npm/package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range deps {
		got = append(got, fmt.Sprintf("%s %s %v", d.Name, d.Licences, d.Verdict.Allowed))
	}
	want := []string{"gpl GPL-3.0-only false", "installed ISC true", "missing  false", "ok (MIT OR GPL-3.0) true", "old MIT true"}
	if !slices.Equal(got, want) {
		t.Errorf("NPMPackages:\n got %q\nwant %q", got, want)
	}
}
