// Package entity keeps the idempotency key in the business row itself,
// instead of a separate inbox table, and guards state-transfer messages by
// version.
//
// # Entity mode
//
// When a message creates a business row whose natural id IS the message's
// key (an order created from an OrderPlaced event keyed by the order id), the
// row's unique constraint is the dedup: no inbox table, one index. Insert
// writes the row with a conflict-free insert (ON CONFLICT DO NOTHING /
// ON DUPLICATE KEY UPDATE, never a caught unique violation, which aborts a
// PostgreSQL transaction). When the row exists, Insert compares the stored
// fingerprint column with the message's:
//
//   - equal: *idem.DuplicateError (ack and skip),
//   - different: *idem.ConflictError (dead-letter and alert, never dropped).
//
// Several rows written for one message commit in one transaction with the
// first one's key: insert the keyed row first with Insert, then the rest with
// plain statements on the same transaction.
//
// # Version guards
//
// Messages that carry absolute state ("order 42 is SHIPPED, version 7") are
// naturally idempotent if stale versions are rejected. Versioned.Apply upserts
// the row only when the message's version is newer than the stored one, in one
// conditional statement; an older or equal version returns idem.ErrSuperseded
// (ack and skip). Out-of-order delivery across partitions ends at the newest
// version.
//
// # With the guard and the broker integrations
//
// Both helpers return the errors the guard understands, so they work inside
// any handler: idem.Guard.Do and idem.DoTx report OutcomeDuplicate,
// OutcomeConflict or OutcomeSuperseded and the broker integrations ack or
// dead-letter accordingly. NewStore gives idem.NewInbox a store with no inbox
// bookkeeping at all (the entity is the only record): its marks always
// acquire and its transactions are plain database transactions, so
//
//	g, _ := idem.NewInbox(entity.NewStore(db, nil), idem.Options{Scope: "orders"})
//	idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		return nil, orders.Insert(ctx, entity.SQL(tx), orderID, fp, cols, vals)
//	})
//
// The store is an idem.TxStore, not an idem.Store: it keeps no record, so it
// has no claim, lease or fencing, and a two-phase guard over it would run a
// side effect outside the database on every delivery. idem.New does not
// compile with it, and the guard's Do, DoKey and ClaimBatch return an error
// wrapping idem.ErrNoRecords without running the handler. Put the work in
// DoTx with an entity insert, or use a store with records (store/postgres,
// store/sqlite, ...) for effects outside the database.
//
// # When natural idempotency is enough
//
// An upsert by business id of absolute values, a PUT, a "set status to X"
// needs no bookkeeping: applying it twice is applying it once. Dedup records
// add cost there (a write per message) without adding safety. Use:
//
//   - the transactional inbox (idem.DoTx with an inbox store) when messages
//     are commands or increments ("charge 10") whose effects are not a row
//     keyed by the message, or span many tables;
//   - entity mode when the message creates one row keyed by its id;
//   - version guards for state-transfer events carrying a version;
//   - two-phase records (idem.Guard.Do) for effects outside the database.
//
// Entity mode cannot replay a stored result unless you read it from the row,
// and it forgets nothing (rows are business data, never swept); the inbox
// can record a result and expires.
//
// MySQL/MariaDB: the statements read "rows affected", which go-sql-driver
// reports as changed rows unless the DSN sets clientFoundRows=true; keep it
// off for these helpers.
package entity
