package postgres

// NeverPauseFirst makes s defer the marker of every DoTx transaction, even
// after one met a recorded key, so that tests under load exercise the
// deferred path on every delivery.
func NeverPauseFirst(s *Store) { s.firstPause = 0 }
