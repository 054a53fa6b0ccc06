package domain

import "unicode/utf8"

// DecodeFull is Decode by encoding/json alone, without the one-pass
// reader, for the fuzz target that holds the two to the same answers.
func DecodeFull(value []byte) (Event, error) {
	if !utf8.Valid(value) || tooDeep(value, MaxJSONDepth) {
		return Decode(value) // refused before either reader runs
	}
	return decodeFull(value, Builtin)
}

// JournalEntries returns how many entries s's journal holds: delivered
// notifications and unknown sends.
func (s *Service) JournalEntries() int {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return len(s.journal.sent) + len(s.journal.unknown)
}
