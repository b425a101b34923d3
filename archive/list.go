package archive

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Entry is one archive of a directory as List finds it.
type Entry struct {
	Dir      string   // the archive's directory
	Manifest Manifest // its manifest (zero when it could not be read)
	Err      error    // why its manifest could not be read, or (with verify) why it failed verification
}

// List returns the archives in dir, oldest range first, each checked
// with Verify when verify is set. A directory whose name starts with a dot
// (one being written, or left by a write that failed) is not an archive;
// nor is anything that is not a directory. An error is returned only when
// dir itself cannot be read.
func List(dir string, verify bool) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("archive directory: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		e := Entry{Dir: filepath.Join(dir, de.Name())}
		e.Manifest, e.Err = ReadManifest(e.Dir)
		if e.Err == nil && e.Manifest.ID != de.Name() {
			e.Err = fmt.Errorf("archive %s: the manifest names %q", de.Name(), e.Manifest.ID)
		}
		if e.Err == nil && verify {
			e.Err = Verify(e.Dir, e.Manifest)
		}
		if errors.Is(e.Err, os.ErrNotExist) && e.Manifest.ID == "" {
			continue // a directory of something else
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(filepath.Base(a.Dir), filepath.Base(b.Dir)) })
	return out, nil
}
