package archive

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Tables are the four tables of a day, in the order they are written.
var Tables = []string{"events", "deliveries", "attempts", "dead_letters"}

// ManifestName is the file, in a day's directory, that describes it.
const ManifestName = "manifest.json"

// FileName is the name of a table's file in a day's directory.
func FileName(table string) string { return table + ".ndjson.gz" }

// Manifest describes one archived day.
type Manifest struct {
	Day        string          `json:"day"` // the partitions' suffix: pYYYYMMDD or legacy
	Lo         time.Time       `json:"lo"`  // the day's events were minted in [Lo, Hi)
	Hi         time.Time       `json:"hi"`
	ArchivedAt time.Time       `json:"archived_at"`
	Files      map[string]File `json:"files"` // by table
}

// File is one table's file of a day: how many rows (lines) it holds once
// decompressed, and the size and SHA-256 (hex) of the compressed file.
type File struct {
	Name   string `json:"name"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ReadManifest reads the manifest of the day in dayDir.
func ReadManifest(dayDir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dayDir, ManifestName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dayDir, ManifestName), err)
	}
	return m, nil
}
