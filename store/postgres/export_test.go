package postgres

// NeverPauseFirst makes s defer the marker of every DoTx transaction, even
// for keys it marked lately and while many of its markers meet recorded
// keys, so that tests under load exercise the deferred path on every
// delivery.
func NeverPauseFirst(s *Store) { s.deferAll = true }

// ForgetMarks makes s remember no key it marked: every marker starts as the
// insert alone, so that tests exercise the path of a redelivery the store
// did not see (another instance's key, one marked before a restart).
func ForgetMarks(s *Store) { s.recent = nil }
