package checkpointstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
)

// pgxSQL is the tables on PostgreSQL. An ownership's ETag is its row's
// version: a claim inserts version 1 where there is no row (ON CONFLICT
// DO NOTHING: the first claimer wins) or bumps the version it names (the
// UPDATE's WHERE: a claim on a stale ETag changes nothing). A checkpoint
// moves with one upsert that only goes forward; under READ COMMITTED a
// concurrent writer of the partition waits for the row, then finds it
// moved.
type pgxSQL struct {
	ts                                  idem.TxStore[pgx.Tx]
	create                              []string
	insertOwner, updateOwner, listOwner string
	advanceSQL, listCheckpoints         string
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, ".", `"."`) + `"` }

func newPgx(ts idem.TxStore[pgx.Tx], opts Options) *pgxSQL {
	o, c := quote(opts.OwnershipTable), quote(opts.CheckpointTable)
	key := `namespace text NOT NULL, event_hub text NOT NULL, consumer_group text NOT NULL, partition_id text NOT NULL`
	pk := `PRIMARY KEY (namespace, event_hub, consumer_group, partition_id)`
	return &pgxSQL{
		ts: ts,
		create: []string{`CREATE TABLE IF NOT EXISTS ` + o + ` (` + key + `,
	owner_id text NOT NULL, version bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), ` + pk + `)`,
			`CREATE TABLE IF NOT EXISTS ` + c + ` (` + key + `,
	sequence_number bigint NOT NULL, "offset" text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp(), ` + pk + `)`},
		insertOwner: `INSERT INTO ` + o + ` (namespace, event_hub, consumer_group, partition_id, owner_id, version)
VALUES ($1, $2, $3, $4, $5, 1) ON CONFLICT DO NOTHING RETURNING version, updated_at`,
		updateOwner: `UPDATE ` + o + ` SET owner_id = $5, version = version + 1, updated_at = clock_timestamp()
WHERE namespace = $1 AND event_hub = $2 AND consumer_group = $3 AND partition_id = $4 AND version = $6
RETURNING version, updated_at`,
		listOwner: `SELECT partition_id, owner_id, version, updated_at FROM ` + o + `
WHERE namespace = $1 AND event_hub = $2 AND consumer_group = $3`,
		advanceSQL: `INSERT INTO ` + c + ` AS c (namespace, event_hub, consumer_group, partition_id, sequence_number, "offset")
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (namespace, event_hub, consumer_group, partition_id) DO UPDATE
SET sequence_number = EXCLUDED.sequence_number, "offset" = EXCLUDED."offset", updated_at = clock_timestamp()
WHERE c.sequence_number < EXCLUDED.sequence_number`,
		listCheckpoints: `SELECT partition_id, sequence_number, "offset" FROM ` + c + `
WHERE namespace = $1 AND event_hub = $2 AND consumer_group = $3`,
	}
}

func (q *pgxSQL) inTx(ctx context.Context, fn func(ctx context.Context, tx any) error) error {
	return q.ts.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx) })
}

// txOf is tx as a pgx.Tx: HandleCheckpoint's, which must be the guard's
// store's, or inTx's.
func txOf(tx any) (pgx.Tx, error) {
	t, ok := tx.(pgx.Tx)
	if !ok {
		return nil, fmt.Errorf("%w: checkpointstore on PostgreSQL: a %T transaction, not a pgx.Tx", idem.ErrNoTx, tx)
	}
	return t, nil
}

func (q *pgxSQL) ddl() []string { return q.create }

func (q *pgxSQL) exec(ctx context.Context, tx any, stmt string) error {
	t, err := txOf(tx)
	if err != nil {
		return err
	}
	_, err = t.Exec(ctx, stmt)
	return err
}

func (q *pgxSQL) claim(ctx context.Context, tx any, o azeventhubs.Ownership) (string, time.Time, bool, error) {
	t, err := txOf(tx)
	if err != nil {
		return "", time.Time{}, false, err
	}
	var (
		version int64
		at      time.Time
	)
	if o.ETag == nil {
		err = t.QueryRow(ctx, q.insertOwner, o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup, o.PartitionID, o.OwnerID).Scan(&version, &at)
	} else {
		old, perr := strconv.ParseInt(string(*o.ETag), 10, 64)
		if perr != nil {
			return "", time.Time{}, false, nil // not one of ours: stale
		}
		err = t.QueryRow(ctx, q.updateOwner, o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup, o.PartitionID, o.OwnerID, old).Scan(&version, &at)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, err
	}
	return itoa(version), at, true, nil
}

func (q *pgxSQL) ownerships(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Ownership, error) {
	t, err := txOf(tx)
	if err != nil {
		return nil, err
	}
	rows, err := t.Query(ctx, q.listOwner, ns, hub, group)
	if err != nil {
		return nil, err
	}
	var (
		out                []azeventhubs.Ownership
		partition, ownerID string
		version            int64
		at                 time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&partition, &ownerID, &version, &at}, func() error {
		tag := azcore.ETag(itoa(version))
		out = append(out, azeventhubs.Ownership{FullyQualifiedNamespace: ns, EventHubName: hub, ConsumerGroup: group,
			PartitionID: partition, OwnerID: ownerID, LastModifiedTime: at, ETag: &tag})
		return nil
	})
	return out, err
}

func (q *pgxSQL) checkpoints(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Checkpoint, error) {
	t, err := txOf(tx)
	if err != nil {
		return nil, err
	}
	rows, err := t.Query(ctx, q.listCheckpoints, ns, hub, group)
	if err != nil {
		return nil, err
	}
	var (
		out       []azeventhubs.Checkpoint
		partition string
		seq       int64
		offset    *string
	)
	_, err = pgx.ForEachRow(rows, []any{&partition, &seq, &offset}, func() error {
		s := seq
		out = append(out, azeventhubs.Checkpoint{FullyQualifiedNamespace: ns, EventHubName: hub, ConsumerGroup: group,
			PartitionID: partition, SequenceNumber: &s, Offset: offset})
		return nil
	})
	return out, err
}

func (q *pgxSQL) advance(ctx context.Context, tx any, c azeventhubs.Checkpoint) (bool, error) {
	t, err := txOf(tx)
	if err != nil {
		return false, err
	}
	tag, err := t.Exec(ctx, q.advanceSQL, c.FullyQualifiedNamespace, c.EventHubName, c.ConsumerGroup, c.PartitionID, *c.SequenceNumber, c.Offset)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
