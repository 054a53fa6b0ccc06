package domain

// JournalEntries returns how many entries s's journal holds: delivered
// notifications and unknown sends.
func (s *Service) JournalEntries() int {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return len(s.journal.sent) + len(s.journal.unknown)
}
