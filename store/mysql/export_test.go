package mysql

import "context"

// SweepQuery is the sweep's locking read of its victims, for the test that
// explains it.
func (s *Store) SweepQuery() string { return s.q.sweepVictims }

// Retry is the store's retry of its own transactions, for its unit test.
func Retry(ctx context.Context, fn func() error) error { return retry(ctx, fn) }
