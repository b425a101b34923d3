package storage

import (
	"context"

	"github.com/pressly/goose/v3"
)

// SetBeforeGroup makes g call f as each group of n requests begins.
func SetBeforeGroup(g *Ingester, f func(n int)) { g.beforeGroup = f }

// SetAfterOpen makes g call f once each group has sent its round trip.
func SetAfterOpen(g *Ingester, f func()) { g.afterOpen = f }

// PendingIngests returns how many requests wait for g's next group.
func PendingIngests(g *Ingester) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// Groups returns how many groups g has run.
func Groups(g *Ingester) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.groups
}

// PlanSettings is the statement that makes the hot statements' plans.
const PlanSettings = planSettings

// IDBound is idBound: the smallest id of prefix minted at t or later.
var IDBound = idBound

// MigrateTo applies the migrations up to version, and no further.
func MigrateTo(ctx context.Context, db *DB, version int64) error {
	return db.withMigrations(ctx, func(p *goose.Provider) error {
		_, err := p.UpTo(ctx, version)
		return err
	})
}
