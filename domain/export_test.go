package domain

// LedgerEntries returns how many keys s's ledger holds something of:
// delivered notifications, owed records and unknown sends.
func (s *Service) LedgerEntries() int {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return len(s.ledger.entries)
}
