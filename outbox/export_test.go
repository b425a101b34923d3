package outbox

import "context"

// SetAfterWrite sets the hook run once a batch is written to webhookd and
// before it is deleted from its source.
func SetAfterWrite(c *Config, f func(ctx context.Context, n int)) { c.afterWrite = f }
