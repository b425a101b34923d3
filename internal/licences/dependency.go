package licences

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Dependency is one Go module or npm package the build uses, and what its
// licence allows.
type Dependency struct {
	Kind     string // "go" or "npm"
	Name     string
	Version  string
	Licences string // SPDX identifiers found (Go), or the expression written (npm)
	Verdict  Verdict
}

// licenceFile matches the names of the files that hold a module's licence
// at its root: LICENSE, LICENCE.md, LICENSE-MIT, COPYING, UNLICENSE, ...
var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([-._][a-z0-9._-]*)?$`)

// GoModules lists the modules that provide the packages of the main module
// in root, their tests' and its tools' (go list -deps -test ./... tool),
// each with the licences its licence files grant. go list reads the module
// cache, which a build (and go tool templ) fills; it downloads a module
// missing from it when it can, and with GOPROXY=off fails naming it.
func GoModules(ctx context.Context, root string) ([]Dependency, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-json=Module", "./...", "tool")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.Bytes())
	}
	type module struct {
		Path, Version, Dir string
		Main               bool
		Replace            *module
	}
	seen := map[string]bool{}
	var deps []Dependency
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var pkg struct{ Module *module }
		if err := dec.Decode(&pkg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		m := pkg.Module
		if m == nil || m.Main || seen[m.Path+"@"+m.Version] { // nil: the standard library
			continue
		}
		seen[m.Path+"@"+m.Version] = true
		dir, version := m.Dir, m.Version
		if m.Replace != nil {
			dir, version = m.Replace.Dir, m.Replace.Path+" "+m.Replace.Version
		}
		if dir == "" {
			return nil, fmt.Errorf("%s %s is not in the module cache: run go mod download", m.Path, m.Version)
		}
		ids, v, err := dirLicences(dir)
		if err != nil {
			return nil, err
		}
		deps = append(deps, Dependency{Kind: "go", Name: m.Path, Version: version, Licences: strings.Join(ids, ", "), Verdict: v})
	}
	slices.SortFunc(deps, func(a, b Dependency) int { return cmp.Compare(a.Name, b.Name) })
	return deps, nil
}

// dirLicences classifies the licence files at the root of a module. When a
// module has several licences (in one file or several) we cannot tell a
// choice from a combination, so every one must be allowed.
func dirLicences(dir string) ([]string, Verdict, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, Verdict{}, err
	}
	var ids []string
	files := 0
	for _, e := range entries {
		if e.IsDir() || !licenceFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, Verdict{}, err
		}
		files++
		for _, id := range Classify(string(b)) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	switch {
	case files == 0:
		return nil, Verdict{Note: "no licence file at the module's root"}, nil
	case len(ids) == 0:
		return nil, Verdict{Note: "licence text not recognised: read it, and teach internal/licences if it is fine"}, nil
	}
	v := Check(ids[0])
	for _, id := range ids[1:] {
		v = both(v, Check(id))
	}
	return ids, v, nil
}

// NPMPackages lists the packages of an npm lockfile (lockfileVersion 2 or
// 3: what npm ci installs, development ones included), each with the
// licence its "license" field states — from the lockfile, or, where the
// lockfile has none, from the installed package.json beside it.
func NPMPackages(lockfile string) ([]Dependency, error) {
	b, err := os.ReadFile(lockfile)
	if err != nil {
		return nil, err
	}
	var lock struct {
		LockfileVersion int `json:"lockfileVersion"`
		Packages        map[string]struct {
			Version string          `json:"version"`
			License json.RawMessage `json:"license"`
			Link    bool            `json:"link"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return nil, fmt.Errorf("%s: %w", lockfile, err)
	}
	if lock.LockfileVersion < 2 {
		return nil, fmt.Errorf("%s: lockfileVersion %d has no packages section; want 2 or 3", lockfile, lock.LockfileVersion)
	}
	var deps []Dependency
	for path, p := range lock.Packages {
		if path == "" || p.Link { // the package itself; a link to a folder listed on its own
			continue
		}
		name := path[strings.LastIndex(path, "node_modules/")+len("node_modules/"):]
		expr := licenseField(p.License)
		if expr == "" {
			if pj, err := os.ReadFile(filepath.Join(filepath.Dir(lockfile), path, "package.json")); err == nil {
				var m struct {
					License json.RawMessage `json:"license"`
				}
				if json.Unmarshal(pj, &m) == nil {
					expr = licenseField(m.License)
				}
			}
		}
		v := Verdict{Note: "no license field"}
		if expr != "" {
			v = CheckExpression(expr)
		}
		deps = append(deps, Dependency{Kind: "npm", Name: name, Version: p.Version, Licences: expr, Verdict: v})
	}
	slices.SortFunc(deps, func(a, b Dependency) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
	})
	return deps, nil
}

// licenseField reads a "license" field: an SPDX expression, or the old
// {"type": "MIT"} form.
func licenseField(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct{ Type string }
	if json.Unmarshal(raw, &o) == nil {
		return o.Type
	}
	return ""
}
