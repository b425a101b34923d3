package api

import (
	"context"

	"github.com/webhookd/webhookd/storage"
)

// eventChecker reads and checks event objects as the event routes take
// them: their shape and limits (parseEvent), then the data of a type the
// catalog marks validate against its schema (validateEvents).
type eventChecker struct {
	db         *storage.DB
	maxPayload int64        // the most bytes an event's data may hold
	schemas    *schemaCache // the catalog's schemas
}

func newEventChecker(db *storage.DB, maxPayload int64) *eventChecker {
	return &eventChecker{db: db, maxPayload: maxPayload, schemas: newSchemaCache()}
}

// LineChecker checks the lines of a bulk job's body (SPEC §2 "Bulk jobs")
// exactly as POST /v1/events checks its body, for the job runner of a
// worker process that serves no API.
type LineChecker struct{ c *eventChecker }

// NewLineChecker returns a LineChecker whose events' data may hold up to
// maxPayloadBytes (Config.MaxPayloadBytes; 0: its default).
func NewLineChecker(db *storage.DB, maxPayloadBytes int64) *LineChecker {
	return &LineChecker{c: newEventChecker(db, Config{MaxPayloadBytes: maxPayloadBytes}.WithDefaults().MaxPayloadBytes)}
}

// Check reads one line as an event of the project. A line the event route
// would refuse returns its *webhookd.Error (validation_failed naming the
// field, invalid_json, payload_too_large); any other error is the
// catalog's that could not be read, and the line was not judged.
func (l *LineChecker) Check(ctx context.Context, projectID string, line []byte) (storage.NewEvent, error) {
	ev, err := l.c.parseEvent(line, "")
	if err != nil {
		return ev, err
	}
	if err := l.c.validateEvents(ctx, projectID, []storage.NewEvent{ev}, func(int) string { return "" }); err != nil {
		return ev, err
	}
	return ev, nil
}
