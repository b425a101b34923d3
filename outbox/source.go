package outbox

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Source is one service database whose outbox a Relay moves, and the
// project (by name, as `webhookd keys create` made it) its events go to.
type Source struct {
	Project     string
	DatabaseURL string
}

// ParseSources reads WEBHOOKD_OUTBOX_SOURCES: space-separated
// PROJECT=DATABASE_URL entries. A project may have several sources; a
// source (URL) is named once. Errors never repeat a URL, which may hold a
// password.
func ParseSources(s string) ([]Source, error) {
	var out []Source
	seen := map[string]bool{}
	for i, f := range strings.Fields(s) {
		project, url, ok := strings.Cut(f, "=")
		if !ok || project == "" || url == "" {
			return nil, fmt.Errorf("entry %d: want PROJECT=DATABASE_URL", i+1)
		}
		if _, err := pgx.ParseConfig(url); err != nil {
			return nil, fmt.Errorf("entry %d (project %s): not a PostgreSQL URL", i+1, project)
		}
		if seen[url] {
			return nil, fmt.Errorf("entry %d (project %s): the same database URL is named twice", i+1, project)
		}
		seen[url] = true
		out = append(out, Source{Project: project, DatabaseURL: url})
	}
	return out, nil
}

// String names the source in logs: its project and host, never its
// password.
func (s Source) String() string {
	c, err := pgx.ParseConfig(s.DatabaseURL)
	if err != nil {
		return s.Project
	}
	return fmt.Sprintf("%s@%s:%d/%s", s.Project, c.Host, c.Port, c.Database)
}
