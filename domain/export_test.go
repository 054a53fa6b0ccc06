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

// LedgerEntries returns how many keys s's ledger holds something of:
// delivered notifications, owed records and unknown sends.
func (s *Service) LedgerEntries() int {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return len(s.ledger.entries)
}
