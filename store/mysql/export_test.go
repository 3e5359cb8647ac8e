package mysql

// SweepQuery is the sweep's locking read of its victims, for the test that
// explains it.
func (s *Store) SweepQuery() string { return s.q.sweepVictims }
