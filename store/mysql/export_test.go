package mysql

// SweepQuery is the sweep's DELETE, for the test that explains it.
func (s *Store) SweepQuery() string { return s.q.sweep }
