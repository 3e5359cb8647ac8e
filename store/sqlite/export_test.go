package sqlite

// SweepQuery is the store's sweep statement, for the query-plan test.
func SweepQuery(s *Store) string { return s.q.sweep }
