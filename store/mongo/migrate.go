package mongoidem

import (
	"context"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Index names Migrate creates.
const (
	// ExpiresIndex is the index on expires_at that Sweep and Stats read.
	ExpiresIndex = "idem_expires_at"
	// TTLIndexName is the TTL index on ttl_at (expireAfterSeconds 0).
	TTLIndexName = "idem_ttl_at"
)

// ttlState is what Migrate learnt about the TTL index.
type ttlState struct {
	mu      sync.Mutex
	checked bool
	present bool
	reason  string // why not, when not present
}

// codeNotImplemented is FerretDB's (and MongoDB's) answer to an index
// option it does not have.
const codeNotImplemented = 238

// Migrate creates the indexes (idempotent; safe from every instance at
// once, since creating an index that exists with the same options does
// nothing): ExpiresIndex on expires_at for Sweep, and TTLIndexName, a TTL
// index on ttl_at, unless Options.TTLIndex is TTLNone. Where the server
// refuses TTL indexes (FerretDB v1 answers NotImplemented), TTLIfSupported
// goes on without one and TTLRequired fails; TTL says which happened. The
// collection itself is created by the first write, as the server does.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fExpiresAt, Value: 1}},
		Options: options.Index().SetName(ExpiresIndex),
	}); err != nil {
		return fmt.Errorf("mongoidem: migrate %s: index %s: %w", s.opts.Collection, ExpiresIndex, err)
	}
	s.ttlState.mu.Lock()
	defer s.ttlState.mu.Unlock()
	s.ttlState.checked, s.ttlState.present, s.ttlState.reason = true, false, ""
	if s.opts.TTLIndex == TTLNone {
		s.ttlState.reason = "Options.TTLIndex is TTLNone"
		return nil
	}
	_, err := s.coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: fTTLAt, Value: 1}},
		Options: options.Index().SetName(TTLIndexName).SetExpireAfterSeconds(0),
	})
	switch {
	case err == nil:
		s.ttlState.present = true
		return nil
	case hasCode(err, codeNotImplemented, 67 /* CannotCreateIndex */, 2 /* BadValue */) && s.opts.TTLIndex == TTLIfSupported:
		s.ttlState.reason = "the server refused it: " + err.Error()
		return nil
	}
	return fmt.Errorf("mongoidem: migrate %s: TTL index %s: %w (set Options.TTLIndex to TTLNone and run an idem.Sweeper where the server has no TTL indexes)",
		s.opts.Collection, TTLIndexName, err)
}

// TTL reports whether the TTL index is in place as of the last Migrate
// of this Store, and when not, why ("" before any Migrate).
func (s *Store) TTL() (present bool, reason string) {
	s.ttlState.mu.Lock()
	defer s.ttlState.mu.Unlock()
	if !s.ttlState.checked {
		return false, ""
	}
	return s.ttlState.present, s.ttlState.reason
}

// Drop deletes the records collection and its lock and turn collections, with every
// record in them. For tests and the idem command's cleanup.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.coll.Drop(ctx); err != nil {
		return fmt.Errorf("mongoidem: drop %s: %w", s.opts.Collection, err)
	}
	if err := s.locks.Drop(ctx); err != nil {
		return fmt.Errorf("mongoidem: drop %s.locks: %w", s.opts.Collection, err)
	}
	if err := s.turns.Drop(ctx); err != nil {
		return fmt.Errorf("mongoidem: drop %s.turns: %w", s.opts.Collection, err)
	}
	return nil
}
