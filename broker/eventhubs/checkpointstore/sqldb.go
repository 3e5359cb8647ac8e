package checkpointstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
)

// sqlDB is the tables on SQLite and MySQL/MariaDB (*sql.Tx), in SQL both
// take, as broker/kafka's checkpoints: backquoted names, ? placeholders,
// VARBINARY keys bound as bytes (compared byte for byte: no collation
// folds case). No driver is imported: the store's *sql.DB brings its own.
//
// An ownership's ETag is its row's version. A first claim inserts version
// 1; when another claim inserted the row first, the insert fails (a
// failed statement leaves the transaction usable on both databases) and a
// read finds the row: the claim lost. A claim on an ETag bumps the
// version it names (the UPDATE's WHERE: a stale ETag changes nothing). An
// ownership's time is the claimer's clock, in microseconds, so that the
// Processor's expiry does not round to DATETIME's seconds.
//
// A checkpoint moves with an UPDATE that only goes forward (on MySQL, a
// locking read of the row's latest version, whatever the isolation
// level); only when it moves nothing does a read tell a checkpoint
// already at or past the event from a missing row, which is inserted. Two
// first writers of one partition race only on that insert: the loser's
// fails, and its event is tried again.
type sqlDB struct {
	ts                                            idem.TxStore[*sql.Tx]
	create                                        []string
	insertOwner, updateOwner, ownerExists         string
	listOwner                                     string
	updateCheckpoint, readCheckpoint, insertCheck string
	listCheckpoints                               string
}

func backquote(name string) string { return "`" + strings.ReplaceAll(name, ".", "`.`") + "`" }

func newSQL(ts idem.TxStore[*sql.Tx], opts Options) *sqlDB {
	o, c := backquote(opts.OwnershipTable), backquote(opts.CheckpointTable)
	key := `namespace VARBINARY(255) NOT NULL, event_hub VARBINARY(255) NOT NULL, consumer_group VARBINARY(255) NOT NULL, partition_id VARBINARY(64) NOT NULL`
	pk := `PRIMARY KEY (namespace, event_hub, consumer_group, partition_id)`
	where := ` WHERE namespace = ? AND event_hub = ? AND consumer_group = ?`
	wherePartition := where + ` AND partition_id = ?`
	return &sqlDB{
		ts: ts,
		create: []string{`CREATE TABLE IF NOT EXISTS ` + o + ` (` + key + `,
	owner_id VARBINARY(255) NOT NULL, version BIGINT NOT NULL, modified_us BIGINT NOT NULL, ` + pk + `)`,
			`CREATE TABLE IF NOT EXISTS ` + c + ` (` + key + `,
	sequence_number BIGINT NOT NULL, ` + "`offset`" + ` VARBINARY(64), updated_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, ` + pk + `)`},
		insertOwner: `INSERT INTO ` + o + ` (namespace, event_hub, consumer_group, partition_id, owner_id, version, modified_us)
VALUES (?, ?, ?, ?, ?, 1, ?)`,
		updateOwner:      `UPDATE ` + o + ` SET owner_id = ?, version = version + 1, modified_us = ?` + wherePartition + ` AND version = ?`,
		ownerExists:      `SELECT COUNT(*) FROM ` + o + wherePartition,
		listOwner:        `SELECT partition_id, owner_id, version, modified_us FROM ` + o + where,
		updateCheckpoint: `UPDATE ` + c + " SET sequence_number = ?, `offset` = ?, updated_at = CURRENT_TIMESTAMP" + wherePartition + ` AND sequence_number < ?`,
		readCheckpoint:   `SELECT sequence_number FROM ` + c + wherePartition,
		insertCheck: `INSERT INTO ` + c + " (namespace, event_hub, consumer_group, partition_id, sequence_number, `offset`)" + `
VALUES (?, ?, ?, ?, ?, ?)`,
		listCheckpoints: `SELECT partition_id, sequence_number, ` + "`offset`" + ` FROM ` + c + where,
	}
}

func (q *sqlDB) inTx(ctx context.Context, fn func(ctx context.Context, tx any) error) error {
	return q.ts.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
}

// sqlTxOf is tx as a *sql.Tx: HandleCheckpoint's, which must be the
// guard's store's, or inTx's.
func sqlTxOf(tx any) (*sql.Tx, error) {
	t, ok := tx.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("%w: checkpointstore on SQLite or MySQL: a %T transaction, not a *sql.Tx", idem.ErrNoTx, tx)
	}
	return t, nil
}

// keyArgs are the bound values of a partition's key, as bytes.
func keyArgs(ns, hub, group string, partition ...string) []any {
	out := []any{[]byte(ns), []byte(hub), []byte(group)}
	for _, p := range partition {
		out = append(out, []byte(p))
	}
	return out
}

func (q *sqlDB) ddl() []string { return q.create }

func (q *sqlDB) exec(ctx context.Context, tx any, stmt string) error {
	t, err := sqlTxOf(tx)
	if err != nil {
		return err
	}
	_, err = t.ExecContext(ctx, stmt)
	return err
}

func (q *sqlDB) claim(ctx context.Context, tx any, o azeventhubs.Ownership) (string, time.Time, bool, error) {
	t, err := sqlTxOf(tx)
	if err != nil {
		return "", time.Time{}, false, err
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	key := keyArgs(o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup, o.PartitionID)
	if o.ETag == nil {
		_, err := t.ExecContext(ctx, q.insertOwner, append(key, []byte(o.OwnerID), at.UnixMicro())...)
		if err == nil {
			return "1", at, true, nil
		}
		var n int
		if rerr := t.QueryRowContext(ctx, q.ownerExists, key...).Scan(&n); rerr != nil || n == 0 {
			return "", time.Time{}, false, err
		}
		return "", time.Time{}, false, nil // claimed first by another
	}
	old, perr := strconv.ParseInt(string(*o.ETag), 10, 64)
	if perr != nil {
		return "", time.Time{}, false, nil // not one of ours: stale
	}
	r, err := t.ExecContext(ctx, q.updateOwner, append(append([]any{[]byte(o.OwnerID), at.UnixMicro()}, key...), old)...)
	if err != nil {
		return "", time.Time{}, false, err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return "", time.Time{}, false, err
	}
	return itoa(old + 1), at, true, nil
}

func (q *sqlDB) ownerships(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Ownership, error) {
	t, err := sqlTxOf(tx)
	if err != nil {
		return nil, err
	}
	rows, err := t.QueryContext(ctx, q.listOwner, keyArgs(ns, hub, group)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []azeventhubs.Ownership
	for rows.Next() {
		var (
			partition, ownerID string
			version, us        int64
		)
		if err := rows.Scan(&partition, &ownerID, &version, &us); err != nil {
			return nil, err
		}
		tag := azcore.ETag(itoa(version))
		out = append(out, azeventhubs.Ownership{FullyQualifiedNamespace: ns, EventHubName: hub, ConsumerGroup: group,
			PartitionID: partition, OwnerID: ownerID, LastModifiedTime: time.UnixMicro(us).UTC(), ETag: &tag})
	}
	return out, rows.Err()
}

func (q *sqlDB) checkpoints(ctx context.Context, tx any, ns, hub, group string) ([]azeventhubs.Checkpoint, error) {
	t, err := sqlTxOf(tx)
	if err != nil {
		return nil, err
	}
	rows, err := t.QueryContext(ctx, q.listCheckpoints, keyArgs(ns, hub, group)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []azeventhubs.Checkpoint
	for rows.Next() {
		var (
			partition string
			seq       int64
			offset    []byte
		)
		if err := rows.Scan(&partition, &seq, &offset); err != nil {
			return nil, err
		}
		c := azeventhubs.Checkpoint{FullyQualifiedNamespace: ns, EventHubName: hub, ConsumerGroup: group,
			PartitionID: partition, SequenceNumber: &seq}
		if offset != nil {
			s := string(offset)
			c.Offset = &s
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// errMoved is a checkpoint written by another transaction between this
// one's update and its read: the event is tried again.
var errMoved = errors.New("checkpointstore: the checkpoint moved under the transaction")

func (q *sqlDB) advance(ctx context.Context, tx any, c azeventhubs.Checkpoint) (bool, error) {
	t, err := sqlTxOf(tx)
	if err != nil {
		return false, err
	}
	seq := *c.SequenceNumber
	var offset []byte
	if c.Offset != nil {
		offset = []byte(*c.Offset)
	}
	key := keyArgs(c.FullyQualifiedNamespace, c.EventHubName, c.ConsumerGroup, c.PartitionID)
	r, err := t.ExecContext(ctx, q.updateCheckpoint, append(append([]any{seq, offset}, key...), seq)...)
	if err != nil {
		return false, err
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return n == 1, err
	}
	var stored int64
	switch err := t.QueryRowContext(ctx, q.readCheckpoint, key...).Scan(&stored); {
	case errors.Is(err, sql.ErrNoRows):
		_, err := t.ExecContext(ctx, q.insertCheck, append(key, seq, offset)...)
		return err == nil, err
	case err != nil:
		return false, err
	case stored >= seq:
		return false, nil
	}
	return false, errMoved
}
