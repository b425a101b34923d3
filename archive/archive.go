// Package archive keeps history past its retention (SPEC §4 "Archive"):
// it writes the events, deliveries, attempts and dead letters of a time
// range to a directory as gzip-compressed NDJSON with a manifest of row
// counts and SHA-256 digests, checks what it wrote before anyone may drop
// the rows, and finds a delivery or dead letter in the archives again
// without the database. No secret goes into an archive (see
// storage.ArchiveRows for what is left out).
//
// An archive is a directory of WEBHOOKD_ARCHIVE_DIR named after its range
// (20260301T000000Z-20260302T000000Z) holding one file a table and
// manifest.json. It is written under a name starting with a dot, made
// durable, verified, and only then renamed into place: a directory whose
// name starts with a dot is never an archive, so a write that failed or
// was cut short leaves nothing that List shows.
package archive

import (
	"compress/gzip"
	"context"
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

	"github.com/webhookd/webhookd/storage"
)

// FormatVersion is the version of the archive format that Write writes
// and Verify reads. It grows when a file's rows change in a way a reader
// of an older version would misread.
const FormatVersion = 1

// ManifestName is the manifest's file name in an archive.
const ManifestName = "manifest.json"

// idLayout is how a range's ends appear in an archive's name.
const idLayout = "20060102T150405Z"

// Manifest describes one archive: its range, when it was written, and
// each file's rows, size and digest.
type Manifest struct {
	Format    int       `json:"format"`
	ID        string    `json:"id"`   // the archive's directory name
	From      time.Time `json:"from"` // the range's start, included
	To        time.Time `json:"to"`   // the range's end, excluded
	CreatedAt time.Time `json:"created_at"`
	Files     []File    `json:"files"` // one per table, in the order of storage.ArchiveTables
}

// File is one compressed NDJSON file of an archive.
type File struct {
	Name   string `json:"name"`   // e.g. deliveries.ndjson.gz
	Table  string `json:"table"`  // e.g. deliveries
	Rows   int64  `json:"rows"`   // lines, one row each
	Bytes  int64  `json:"bytes"`  // size of the compressed file
	SHA256 string `json:"sha256"` // hex SHA-256 of the compressed file
}

// Rows is the row count of table, 0 when the manifest has no such file.
func (m Manifest) Rows(table string) int64 {
	for _, f := range m.Files {
		if f.Table == table {
			return f.Rows
		}
	}
	return 0
}

// Bytes is the size of the archive's files, manifest aside.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n
}

// Source is where Write reads the history of a range from: storage.DB.
type Source interface {
	ArchiveRows(ctx context.Context, from, to time.Time, fn func(table string, row []byte) error) error
}

var _ Source = (*storage.DB)(nil)

// SourceError is an error of the Source (the database) while Write read
// the history: it may name hosts and users, so /readyz does not show it.
type SourceError struct{ Err error }

func (e SourceError) Error() string { return "reading the history: " + e.Err.Error() }
func (e SourceError) Unwrap() error { return e.Err }

// ErrExists is returned by Write when the directory already holds an
// archive of the range: an archive is never overwritten.
var ErrExists = errors.New("an archive of this range already exists")

// ID is the name of the archive of [from, to).
func ID(from, to time.Time) string {
	return from.UTC().Format(idLayout) + "-" + to.UTC().Format(idLayout)
}

// Write writes the archive of [from, to) from src into dir (made if
// missing), verifies it, and returns its manifest. Only a verified
// archive appears under its name; on any error nothing does, and what was
// written is removed. It returns ErrExists when dir has one of the range.
func Write(ctx context.Context, src Source, dir string, from, to time.Time) (Manifest, error) {
	from, to = from.UTC(), to.UTC()
	if !from.Before(to) {
		return Manifest{}, fmt.Errorf("archive: the range's start %s is not before its end %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	m := Manifest{Format: FormatVersion, ID: ID(from, to), From: from, To: to}
	final := filepath.Join(dir, m.ID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	if _, err := os.Stat(final); err == nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, ErrExists)
	}
	removeStale(dir, m.ID, time.Now())
	tmp, err := os.MkdirTemp(dir, "."+m.ID+".tmp-")
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(tmp)
		}
	}()
	files, err := writeFiles(ctx, src, tmp, from, to)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, err)
	}
	m.Files, m.CreatedAt = files, time.Now().UTC().Truncate(time.Second)
	if err := writeManifest(tmp, m); err != nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, err)
	}
	if err := Verify(tmp, m); err != nil {
		return Manifest{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, ErrExists)
		}
		return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, err)
	}
	keep = true
	if err := syncDir(dir); err != nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", m.ID, err)
	}
	return m, nil
}

// staleAfter is how long after its last change a write's temporary
// directory is taken for one left by a write that crashed: far longer than
// a write of a day takes.
const staleAfter = 6 * time.Hour

// removeStale removes the temporary directories of earlier writes of the
// archive id that crashed, unchanged for staleAfter, so they do not fill
// the disk. (A write's directory changes when it starts and when it ends,
// minutes apart.)
func removeStale(dir, id string, now time.Time) {
	stale, _ := filepath.Glob(filepath.Join(dir, "."+id+".tmp-*"))
	for _, p := range stale {
		if st, err := os.Stat(p); err == nil && st.IsDir() && now.Sub(st.ModTime()) > staleAfter {
			os.RemoveAll(p)
		}
	}
}

// tableFile is one table's file while it is written: rows go through gzip
// into the file and a digest at once.
type tableFile struct {
	f     *os.File
	gz    *gzip.Writer
	sum   hash.Hash
	count *countingWriter
	rows  int64
}

func (t *tableFile) write(row []byte) error {
	if _, err := t.gz.Write(row); err != nil {
		return err
	}
	t.rows++
	_, err := t.gz.Write([]byte{'\n'})
	return err
}

// close finishes the gzip stream and makes the file durable.
func (t *tableFile) close() error {
	return errors.Join(t.gz.Close(), t.f.Sync(), t.f.Close())
}

// writeFiles writes one file a table into dir and describes them.
func writeFiles(ctx context.Context, src Source, dir string, from, to time.Time) (_ []File, err error) {
	tables := map[string]*tableFile{}
	defer func() {
		for _, t := range tables {
			t.f.Close() // a second close after close() is harmless
		}
	}()
	for _, table := range storage.ArchiveTables {
		f, err := os.OpenFile(filepath.Join(dir, fileName(table)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			return nil, err
		}
		t := &tableFile{f: f, sum: sha256.New(), count: &countingWriter{}}
		t.gz = gzip.NewWriter(io.MultiWriter(f, t.sum, t.count))
		tables[table] = t
	}
	var writeErr error // what went wrong on our side, if anything
	err = src.ArchiveRows(ctx, from, to, func(table string, row []byte) error {
		t, ok := tables[table]
		if !ok {
			writeErr = fmt.Errorf("rows of an unknown table %q", table)
		} else if err := t.write(row); err != nil {
			writeErr = fmt.Errorf("%s: %w", fileName(table), err)
		}
		return writeErr
	})
	switch {
	case writeErr != nil:
		return nil, writeErr
	case err != nil:
		return nil, SourceError{err}
	}
	files := make([]File, 0, len(tables))
	for _, table := range storage.ArchiveTables {
		t := tables[table]
		if err := t.close(); err != nil {
			return nil, fmt.Errorf("%s: %w", fileName(table), err)
		}
		files = append(files, File{Name: fileName(table), Table: table, Rows: t.rows, Bytes: t.count.n,
			SHA256: hex.EncodeToString(t.sum.Sum(nil))})
	}
	return files, nil
}

// fileName is the name of a table's file.
func fileName(table string) string { return table + ".ndjson.gz" }

// writeManifest writes m as dir's manifest.json, durably, and then dir's
// entries.
func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ManifestName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(b, '\n'))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("%s: %w", ManifestName, err)
	}
	return syncDir(dir)
}

// syncDir makes dir's entries (files made or renamed in it) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// countingWriter counts the bytes written through it.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
