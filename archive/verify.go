package archive

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Verify reads every file of the day in dayDir again and checks it
// against the manifest: its size and SHA-256, and the rows (lines) it
// decompresses to. It returns the manifest, and an error naming the first
// file that differs.
func Verify(dayDir string) (Manifest, error) {
	m, err := ReadManifest(dayDir)
	if err != nil {
		return m, err
	}
	for _, t := range Tables {
		want, ok := m.Files[t]
		if !ok {
			return m, fmt.Errorf("%s: the manifest names no %s file", dayDir, t)
		}
		got, err := measure(filepath.Join(dayDir, FileName(t)))
		if err != nil {
			return m, err
		}
		if got.Rows != want.Rows || got.Bytes != want.Bytes || got.SHA256 != want.SHA256 {
			return m, fmt.Errorf("%s: %d rows, %d bytes, sha256 %s; the manifest says %d, %d, %s",
				filepath.Join(dayDir, FileName(t)), got.Rows, got.Bytes, got.SHA256, want.Rows, want.Bytes, want.SHA256)
		}
	}
	return m, nil
}

// measure reads a table's file: its size, SHA-256 and lines.
func measure(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	var n counter
	gz, err := gzip.NewReader(io.TeeReader(f, io.MultiWriter(h, &n)))
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	var lines lineCounter
	if _, err := io.Copy(&lines, gz); err != nil {
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := io.Copy(io.Discard, io.TeeReader(f, io.MultiWriter(h, &n))); err != nil { // anything after the gzip stream
		return File{}, err
	}
	return File{Name: filepath.Base(name), Rows: int64(lines), Bytes: int64(n), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type lineCounter int64

func (c *lineCounter) Write(p []byte) (int, error) {
	*c += lineCounter(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}
