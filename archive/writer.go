package archive

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Writer writes one day into a temporary directory beside its final place;
// Commit moves it there, Abort removes it. Table files are streamed:
// nothing holds a whole table in memory.
type Writer struct {
	dir, tmp string
	m        Manifest
	open     *tableFile
	done     bool
}

// Create begins writing the day suffix, whose events were minted in
// [lo, hi), under dir (made if missing). Only one Writer of a day may run
// at a time: Create removes what an earlier one left unfinished.
func Create(dir, suffix string, lo, hi time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	// What a writer of this day left when its process died: one writer
	// at a time writes a day (retention runs in one process at a time).
	stale, _ := filepath.Glob(filepath.Join(dir, ".tmp-"+suffix+"-*"))
	old, _ := filepath.Glob(filepath.Join(dir, ".old-"+suffix+"-*"))
	for _, s := range append(stale, old...) {
		os.RemoveAll(s)
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-"+suffix+"-")
	if err != nil {
		return nil, err
	}
	return &Writer{dir: dir, tmp: tmp, m: Manifest{Day: suffix, Lo: lo.UTC(), Hi: hi.UTC(), Files: map[string]File{}}}, nil
}

// Table closes the table written before, if any, and returns where the
// NDJSON of table goes: one JSON object a line.
func (w *Writer) Table(table string) (io.Writer, error) {
	if err := w.closeTable(); err != nil {
		return nil, err
	}
	if _, ok := w.m.Files[table]; ok {
		return nil, fmt.Errorf("archive: %s written twice", table)
	}
	f, err := os.OpenFile(filepath.Join(w.tmp, FileName(table)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, err
	}
	t := &tableFile{table: table, f: f, h: sha256.New()}
	t.gz = gzip.NewWriter(io.MultiWriter(f, t.h, (*counter)(&t.bytes)))
	w.open = t
	return t, nil
}

// closeTable finishes the open table's file and notes it in the manifest.
func (w *Writer) closeTable() error {
	t := w.open
	if t == nil {
		return nil
	}
	w.open = nil
	err := t.gz.Close()
	if err == nil {
		err = t.f.Sync()
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("archive: %s: %w", t.table, err)
	}
	if t.partial {
		return fmt.Errorf("archive: %s: its last line has no end", t.table)
	}
	w.m.Files[t.table] = File{Name: FileName(t.table), Rows: t.rows, Bytes: t.bytes, SHA256: hex.EncodeToString(t.h.Sum(nil))}
	return nil
}

// Commit finishes the last table, writes the manifest last, syncs, and
// renames the day into place (replacing an earlier archive of the same
// day, from a pass whose drop was refused), and returns the manifest.
func (w *Writer) Commit(now time.Time) (Manifest, error) {
	if err := w.closeTable(); err != nil {
		return w.m, err
	}
	for _, t := range Tables {
		if _, ok := w.m.Files[t]; !ok {
			return w.m, fmt.Errorf("archive: %s was not written", t)
		}
	}
	w.m.ArchivedAt = now.UTC()
	b, err := json.MarshalIndent(w.m, "", "  ")
	if err != nil {
		return w.m, err
	}
	if err := writeSynced(filepath.Join(w.tmp, ManifestName), append(b, '\n')); err != nil {
		return w.m, err
	}
	if err := syncDir(w.tmp); err != nil {
		return w.m, err
	}
	final := filepath.Join(w.dir, w.m.Day)
	var old string
	if _, err := os.Stat(final); err == nil {
		old = filepath.Join(w.dir, ".old-"+w.m.Day+"-"+filepath.Base(w.tmp))
		if err := os.Rename(final, old); err != nil {
			return w.m, err
		}
	}
	if err := os.Rename(w.tmp, final); err != nil {
		return w.m, err
	}
	w.done = true
	if old != "" {
		os.RemoveAll(old)
	}
	return w.m, syncDir(w.dir)
}

// Abort removes what was written, unless it was committed.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	if w.open != nil {
		w.open.f.Close()
		w.open = nil
	}
	os.RemoveAll(w.tmp)
	w.done = true
}

// tableFile is one table's file being written: lines counted, then
// compressed, the compressed bytes hashed and counted on their way to the
// file.
type tableFile struct {
	table   string
	f       *os.File
	gz      *gzip.Writer
	h       hash.Hash
	rows    int64
	bytes   int64
	partial bool // the last byte written was not a line's end
}

func (t *tableFile) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	t.rows += int64(bytes.Count(p, []byte{'\n'}))
	t.partial = p[len(p)-1] != '\n'
	return t.gz.Write(p)
}

// counter counts the bytes written to it.
type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncDir makes a directory's entries durable (a rename in it, say).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
