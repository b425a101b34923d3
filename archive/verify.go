package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/webhookd/webhookd/storage"
)

// ReadManifest reads the manifest of the archive in dir.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, fmt.Errorf("archive %s: %w", filepath.Base(dir), err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("archive %s: %s: %w", filepath.Base(dir), ManifestName, err)
	}
	if m.Format != FormatVersion {
		return m, fmt.Errorf("archive %s: format %d, this webhookd reads format %d", filepath.Base(dir), m.Format, FormatVersion)
	}
	return m, nil
}

// Verify checks the archive in dir against m: every table has its file,
// and each file has the size and SHA-256 m gives, decompresses, and holds
// m's number of rows, each a JSON object. An error names the archive and
// the first file that does not match.
func Verify(dir string, m Manifest) error {
	if m.Format != FormatVersion {
		return fmt.Errorf("archive %s: format %d, this webhookd reads format %d", m.ID, m.Format, FormatVersion)
	}
	for _, table := range storage.ArchiveTables {
		if !slices.ContainsFunc(m.Files, func(f File) bool { return f.Table == table && f.Name == fileName(table) }) {
			return fmt.Errorf("archive %s: the manifest lists no %s", m.ID, fileName(table))
		}
	}
	for _, f := range m.Files {
		if err := verifyFile(filepath.Join(dir, f.Name), f); err != nil {
			return fmt.Errorf("archive %s: %s: %w", m.ID, f.Name, err)
		}
	}
	return nil
}

// verifyFile reads the file once, through its digest and gzip at once.
// Corruption shows as a digest that differs, said before whatever gzip
// made of the damaged bytes.
func verifyFile(path string, want File) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return err
	}
	if st.Size() != want.Bytes {
		return fmt.Errorf("%d bytes, the manifest says %d", st.Size(), want.Bytes)
	}
	sum := sha256.New()
	tee := io.TeeReader(file, sum)
	rows, readErr := countRows(tee)
	if _, err := io.Copy(sum, file); err != nil { // what gzip left unread, if it stopped early
		return err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want.SHA256 {
		return fmt.Errorf("SHA-256 %s, the manifest says %s", got, want.SHA256)
	}
	if readErr != nil {
		return readErr
	}
	if rows != want.Rows {
		return fmt.Errorf("%d rows, the manifest says %d", rows, want.Rows)
	}
	return nil
}

// countRows decompresses r and counts its lines, each of which must be a
// JSON object.
func countRows(r io.Reader) (int64, error) {
	var n int64
	err := eachRow(r, func(row []byte) (bool, error) {
		n++
		if len(row) == 0 || row[0] != '{' || !json.Valid(row) {
			return false, fmt.Errorf("row %d is not a JSON object", n)
		}
		return true, nil
	})
	return n, err
}

// eachRow decompresses r and calls fn with each line, without its
// newline, until fn returns false or an error. A last line without its
// newline is an error: a file cut short.
func eachRow(r io.Reader, fn func(row []byte) (bool, error)) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	defer gz.Close()
	br := bufio.NewReaderSize(gz, 64<<10)
	var long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if long != nil {
			line, long = append(long, line...), nil
		}
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				return errors.New("the last row has no newline: the file was cut short")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		more, err := fn(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil || !more {
			return err
		}
	}
}
