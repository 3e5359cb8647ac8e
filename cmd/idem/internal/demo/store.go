package demo

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// demoStore is the store a run uses, and how to clean it up.
type demoStore struct {
	h     *dsn.Handle
	label string
	undo  []func()
}

// openStore opens the store named by raw, or an embedded one in a temporary
// directory (SQLite where this build has it, else memory). It migrates the
// schema: the demo owns a fresh store, and a user-named one gets its tables
// created the same way idem migrate would.
func openStore(ctx context.Context, raw, runID string) (*demoStore, error) {
	s := &demoStore{}
	if raw == "" {
		if slices.Contains(dsn.Schemes(), "sqlite") {
			dir, err := os.MkdirTemp("", "idem-demo-store-")
			if err != nil {
				return nil, fmt.Errorf("temporary directory for the store: %w", err)
			}
			s.undo = append(s.undo, func() { os.RemoveAll(dir) })
			raw = "sqlite://" + filepath.ToSlash(filepath.Join(dir, "idem.db"))
			s.label = "embedded SQLite (temporary)"
		} else {
			raw = "memory://"
			s.label = "in-process memory"
		}
	}
	h, err := dsn.Open(ctx, raw)
	if err != nil {
		s.close()
		return nil, err
	}
	s.h = h
	s.undo = append(s.undo, func() { h.Close() })
	if s.label == "" {
		s.label = h.Redacted
	}
	if h.Migrate != nil {
		if err := h.Migrate(ctx); err != nil {
			s.close()
			return nil, fmt.Errorf("migrate the demo store %s: %w", h.Redacted, err)
		}
	}
	return s, nil
}

// ledger picks the mode: the transactional inbox when the store has one
// (over *sql.Tx or pgx.Tx; the ledger tables live beside the records), else
// two-phase with the ledger in memory.
func (s *demoStore) ledger(ctx context.Context, mode, runID string) (ledger, error) {
	_, sqlTx := s.h.Store.(idem.TxStore[*sql.Tx])
	_, pgTx := s.h.Store.(idem.TxStore[pgx.Tx])
	sqlTx = sqlTx && s.h.SQL != nil
	pgTx = pgTx && s.h.PG != nil
	switch {
	case mode == "tx" && !sqlTx && !pgTx:
		return nil, fmt.Errorf("%w: the %s store has no transactional inbox; use --mode two-phase or auto", ErrConfig, s.h.Scheme)
	case mode == "two-phase":
		return newMemLedger(), nil
	case sqlTx:
		return newSQLLedger(ctx, s.h.SQL, runID, s.h.Scheme)
	case pgTx:
		return newPGLedger(ctx, s.h.PG, runID)
	}
	return newMemLedger(), nil
}

func (s *demoStore) close() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}
