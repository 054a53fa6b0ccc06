package double

import "time"

// SetClock sets the clock of d's rate limit.
func SetClock(d *Double, now func() time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.now = now
}
