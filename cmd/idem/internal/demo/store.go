package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/memory"
	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/sqlite"
)

// demoStore is the store a run uses, and how to clean it up.
type demoStore struct {
	h     *dsn.Handle
	label string
	// named is true for a store the user named (--store): the run removes
	// what it wrote there. An embedded store goes with its directory.
	named bool
	// createdSchema is true when the run migrated a named store that had
	// no schema yet.
	createdSchema bool
	undo          []func()
}

// openStore opens the store named by raw, or an embedded one in a temporary
// directory (SQLite where this build has it, else memory). A server that
// does not answer, or refuses the login, fails here, named, with how to fix
// it. It migrates the schema: the demo owns a fresh store, and a user-named
// one gets its tables created the same way idem migrate would.
func openStore(ctx context.Context, raw, runID string) (*demoStore, error) {
	s := &demoStore{named: raw != "" && raw != InProcessCosmos}
	if raw == InProcessCosmos {
		d, stop, err := inProcessCosmos()
		if err != nil {
			return nil, err
		}
		s.undo = append(s.undo, stop)
		raw, s.label = d, "in-process Azure Cosmos DB (cosmostest)"
	}
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
	if h.Ping != nil {
		if err := h.Ping(ctx); err != nil {
			s.close()
			return nil, err
		}
	}
	if s.named && h.Probe != nil && h.Migrate != nil {
		s.createdSchema = errors.Is(h.Probe(ctx), dsn.ErrNoSchema)
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

// removeRecords deletes the records of scope, the run's own, from a store
// the user named, and returns how many it deleted. The Store contract has no
// delete (records leave by expiry), so this goes to each store's table or
// keys, which only the run's scope names.
func (s *demoStore) removeRecords(ctx context.Context, scope string) (int64, error) {
	switch st := s.h.Native.(type) {
	case *sqlite.Store:
		return execCount(st.DB().ExecContext(ctx, `DELETE FROM `+st.Table()+` WHERE scope = ?`, scope))
	case *mysql.Store:
		return execCount(st.DB().ExecContext(ctx, "DELETE FROM `"+st.Table()+"` WHERE scope = ?", scope))
	case *postgres.Store:
		tag, err := s.h.PG.Exec(ctx, `DELETE FROM `+st.Table()+` WHERE scope = $1`, scope)
		return tag.RowsAffected(), err
	case *redisidem.Store:
		return removeRedisRecords(ctx, st, s.h.Redis, scope)
	case *mongoidem.Store:
		res, err := st.Collection().DeleteMany(ctx, bson.D{{Key: "scope", Value: scope}})
		if err != nil {
			return 0, err
		}
		return res.DeletedCount, nil
	case *memory.Store:
		return 0, nil // gone with the process
	case *cosmos.Store:
		return removeCosmosRecords(ctx, st, scope)
	}
	return 0, fmt.Errorf("the demo cannot remove records from a %s store", s.h.Scheme)
}

func execCount(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// removeRedisRecords lists the scope's records a page at a time and deletes
// their keys, one command each (the keys of one scope hash to many cluster
// slots).
func removeRedisRecords(ctx context.Context, st *redisidem.Store, c goredis.UniversalClient, scope string) (int64, error) {
	var n int64
	f := idem.ListFilter{Scope: scope, Limit: 500}
	for {
		recs, err := st.List(ctx, f)
		if err != nil {
			return n, err
		}
		if len(recs) == 0 {
			return n, nil
		}
		cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, r := range recs {
				p.Del(ctx, st.Key(idem.Key{Scope: r.Scope, ID: r.ID}))
			}
			return nil
		})
		for _, cmd := range cmds {
			if d, ok := cmd.(*goredis.IntCmd); ok {
				n += d.Val()
			}
		}
		if err != nil {
			return n, err
		}
		f.After = recs[len(recs)-1].Cursor()
	}
}

func (s *demoStore) close() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}
