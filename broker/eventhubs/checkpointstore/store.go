// Package checkpointstore is an azeventhubs.CheckpointStore in the
// business database, beside idem's records: partition ownership, claimed
// with ETag-style concurrency as the SDK's Blob Storage store does, and
// checkpoints, which eventhubs.HandleCheckpoint writes in the transaction
// of each event's effects.
//
//	cps, _ := checkpointstore.New(store, checkpointstore.Options{}) // store/postgres, store/sqlite, store/mysql
//	_ = cps.Migrate(ctx)
//	p, _ := azeventhubs.NewProcessor(consumerClient, cps, nil)
//	err := eventhubs.Consume(ctx, p, g, eventhubs.HandleCheckpoint(apply), opts)
//
// Processors on one Store balance a hub's partitions between them as on
// Blob Storage. A checkpoint only ever moves forward: SetCheckpoint
// behind the stored one changes nothing (delete the row to start a
// partition over).
//
// On PostgreSQL (store/postgres) the tables are written through pgx.Tx;
// on SQLite (store/sqlite) and MySQL/MariaDB (store/mysql) through
// *sql.Tx, in SQL both take, with the store's own driver (this package
// imports none). It is a module of its own so that pgx stays out of the
// module graph of users of broker/eventhubs on Blob Storage.
package checkpointstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
)

// Default table names.
const (
	DefaultOwnershipTable  = "idem_eventhubs_ownership"
	DefaultCheckpointTable = "idem_eventhubs_checkpoints"
)

// Options name the tables. The zero value takes the defaults.
type Options struct {
	// OwnershipTable and CheckpointTable are plain identifiers, optionally
	// qualified by a schema ("billing.eh_ownership"), of at most 63 bytes
	// each part. Defaults DefaultOwnershipTable, DefaultCheckpointTable.
	OwnershipTable, CheckpointTable string
}

// Store is an azeventhubs.CheckpointStore on the database of an idem
// store with transactions. Its methods are safe for concurrent use.
type Store struct {
	d dialect
}

var _ azeventhubs.CheckpointStore = (*Store)(nil)

// dialect is the SQL of one kind of transaction.
type dialect interface {
	inTx(ctx context.Context, fn func(ctx context.Context, tx any) error) error
	// ddl is the statements creating the tables; exec runs one.
	ddl() []string
	exec(ctx context.Context, tx any, stmt string) error
	// claim takes o if its ETag is the row's (nil: no row yet), returning
	// the new ETag and time; ok false when another claim came first.
	claim(ctx context.Context, tx any, o azeventhubs.Ownership) (etag string, at time.Time, ok bool, err error)
	ownerships(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Ownership, error)
	checkpoints(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Checkpoint, error)
	// advance moves c's partition to c if the stored checkpoint is behind
	// it (false otherwise), creating the row if there is none; it takes
	// the row's lock.
	advance(ctx context.Context, tx any, c azeventhubs.Checkpoint) (bool, error)
}

// ErrInvalidTable is wrapped (with idem.ErrInvalidOptions) for a table
// name that is not an identifier.
var ErrInvalidTable = errors.New("checkpointstore: invalid table name")

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// New returns the Store on st's database: st is store/postgres (pgx.Tx),
// store/sqlite or store/mysql (*sql.Tx). A store without pgx.Tx or
// *sql.Tx transactions is refused with idem.ErrNoTx; a table name that is
// not an identifier (or, on *sql.Tx, starts with SQLite's reserved
// "sqlite_"), with ErrInvalidTable.
func New(st idem.Store, opts Options) (*Store, error) {
	if opts.OwnershipTable == "" {
		opts.OwnershipTable = DefaultOwnershipTable
	}
	if opts.CheckpointTable == "" {
		opts.CheckpointTable = DefaultCheckpointTable
	}
	for _, n := range []string{opts.OwnershipTable, opts.CheckpointTable} {
		if !nameRE.MatchString(n) {
			return nil, fmt.Errorf("%w: %w %q", idem.ErrInvalidOptions, ErrInvalidTable, n)
		}
	}
	switch ts := st.(type) {
	case idem.TxStore[pgx.Tx]:
		return &Store{d: newPgx(ts, opts)}, nil
	case idem.TxStore[*sql.Tx]:
		for _, n := range []string{opts.OwnershipTable, opts.CheckpointTable} {
			if strings.HasPrefix(strings.ToLower(n[strings.LastIndex(n, ".")+1:]), "sqlite_") {
				return nil, fmt.Errorf("%w: %w %q: names starting with sqlite_ are reserved by SQLite", idem.ErrInvalidOptions, ErrInvalidTable, n)
			}
		}
		return &Store{d: newSQL(ts, opts)}, nil
	}
	return nil, fmt.Errorf("%w: checkpointstore: %T has no pgx.Tx or *sql.Tx transactions", idem.ErrNoTx, st)
}

// Migrate creates the tables if they do not exist. Run it once before the
// Processors start, as the idem store's own Migrate.
func (s *Store) Migrate(ctx context.Context) error {
	err := s.d.inTx(ctx, func(ctx context.Context, tx any) error {
		for _, stmt := range s.d.ddl() {
			if err := s.d.exec(ctx, tx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpointstore: create tables: %w", err)
	}
	return nil
}

// ClaimOwnership claims each ownership whose ETag is the stored one (nil:
// a partition never owned) and returns those it claimed, with their new
// ETag and time; the others were claimed by another Processor first.
func (s *Store) ClaimOwnership(ctx context.Context, want []azeventhubs.Ownership, _ *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	var got []azeventhubs.Ownership
	for _, o := range want {
		err := s.d.inTx(ctx, func(ctx context.Context, tx any) error {
			etag, at, ok, err := s.d.claim(ctx, tx, o)
			if ok {
				tag := azcore.ETag(etag)
				o.ETag, o.LastModifiedTime = &tag, at
				got = append(got, o)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("checkpointstore: claim partition %s: %w", o.PartitionID, err)
		}
	}
	return got, nil
}

// ListOwnership lists the ownerships of a hub's consumer group.
func (s *Store) ListOwnership(ctx context.Context, ns, hub, group string, _ *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	var out []azeventhubs.Ownership
	err := s.d.inTx(ctx, func(ctx context.Context, tx any) (err error) {
		out, err = s.d.ownerships(ctx, tx, ns, hub, group)
		return err
	})
	return out, err
}

// ListCheckpoints lists the checkpoints of a hub's consumer group.
func (s *Store) ListCheckpoints(ctx context.Context, ns, hub, group string, _ *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	var out []azeventhubs.Checkpoint
	err := s.d.inTx(ctx, func(ctx context.Context, tx any) (err error) {
		out, err = s.d.checkpoints(ctx, tx, ns, hub, group)
		return err
	})
	return out, err
}

// SetCheckpoint moves c's partition forward to c. In HandleCheckpoint's
// transaction (eventhubs.TxCheckpointFrom) it writes there, and returns
// an error wrapping eventhubs.ErrCheckpointBehind when the checkpoint is
// at or past c already; otherwise in a transaction of its own, and a
// checkpoint behind the stored one changes nothing.
func (s *Store) SetCheckpoint(ctx context.Context, c azeventhubs.Checkpoint, _ *azeventhubs.SetCheckpointOptions) error {
	if c.SequenceNumber == nil {
		return errors.New("checkpointstore: a checkpoint without a sequence number")
	}
	if tc := eventhubs.TxCheckpointFrom(ctx); tc != nil {
		moved, err := s.d.advance(tc.Ctx, tc.Tx, c)
		if err != nil {
			return err
		}
		tc.Written()
		if !moved {
			return fmt.Errorf("partition %s at sequence number %d: %w", c.PartitionID, *c.SequenceNumber, eventhubs.ErrCheckpointBehind)
		}
		return nil
	}
	return s.d.inTx(ctx, func(ctx context.Context, tx any) error {
		_, err := s.d.advance(ctx, tx, c)
		return err
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
