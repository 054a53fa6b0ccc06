package redis

// Look makes the store look at the server now, as its watch does every
// HealthConfig.Interval (health.go), and returns once the look is done.
// Tests that must know a look happened after an event call it, with an
// Interval too long to tick during the test.
func (s *Store) Look() { s.look(s.health) }

// IsMoved reports whether err wraps a MOVED reply.
func IsMoved(err error) bool { return isMoved(err) }
