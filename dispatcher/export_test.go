package dispatcher

import "time"

// SilenceHeartbeats stops w's heartbeats and makes it believe the last one
// that landed was sent ago: past storage.WorkerStale less a beat and a
// half, its leases are in doubt (Deliverer.leaseInDoubt).
func (w *Worker) SilenceHeartbeats(ago time.Duration) {
	w.heart.Stop()
	w.Deliverer.alive.landed(time.Now().Add(-ago))
}

// ResumeHeartbeats starts w's heartbeats again.
func (w *Worker) ResumeHeartbeats() { w.heart.start(w.background, heartbeatInterval, w.beat) }

// InBackground runs f now on w's background attempts (Worker.inBackground).
func (w *Worker) InBackground(f func()) { w.inBackground(time.Time{}, f) }
