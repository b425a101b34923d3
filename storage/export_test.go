package storage

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
