// Package storekit is for the authors of idem stores: the record
// transitions of the Store contract computed in Go, the checks every store
// runs on a request before taking it, the optional interfaces the guard
// looks for, and the helpers for stores that filter, count, retain or
// supersede in Go.
//
// A consumer author never needs it: package idem keeps what a consumer, an
// HTTP handler or an operator's tool uses (Guard, Key, Record, Store and
// its optional Inspector, ActivityCounter, Retainer and Superseder). A
// store author implements idem.Store with this package's help and proves
// it with store/storetest:
//
//	func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
//		req, err := storekit.PrepareClaim(req)
//		if err != nil {
//			return idem.Claim{}, err
//		}
//		s.mu.Lock()
//		defer s.mu.Unlock()
//		cur := s.records[req.Key] // nil when absent
//		c, write := storekit.ApplyClaim(cur, req)
//		if write {
//			s.records[req.Key] = &c.Record
//		}
//		return c, nil
//	}
//
// Stores that claim in one statement or script (PostgreSQL, MySQL, Redis)
// encode the same rules in their query and run the conformance suite to
// prove it; the Go transitions here are the reference they are held to.
package storekit
