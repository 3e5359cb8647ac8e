// Package load loads files and query results row by row with a key per row,
// so that reprocessing the same input (a retried job, a file sent twice, an
// export that overlaps the last one) writes nothing twice, and a row whose
// key is stored with other content is reported with its row number, never
// written over or dropped without a word.
//
// # Keys and content
//
// Every row has a key, its identity across loads: a business key (an order
// id, a tenant and an invoice number joined with JoinKey), or, for rows
// without one, the Hash of their content. Beside it, a fingerprint of the
// content that must not change under the key. Loading a row then has three
// outcomes:
//
//   - new: the key was not stored; the row is written;
//   - duplicate: the key is stored with the same fingerprint (loaded
//     before, or repeated in this input); nothing is written;
//   - conflict: the key is stored with another fingerprint; nothing is
//     written, what is stored stays, and the row goes into the Summary's
//     Conflicts (row, line, key, both fingerprints) and to
//     Options.OnConflict.
//
// # Batches and transactions
//
// Rows are claimed in batches (Options.BatchSize) by a Writer, inside the
// load's transaction: the claims and the rows they stand for commit
// together, or neither does. Run gives each batch a transaction of its own,
// so a load cut off halfway keeps what it committed and its rerun settles
// those rows as duplicates and goes on; RunTx does it all in the caller's
// transaction. Two Writers come with idem:
//
//   - Marked, the transactional inbox: each key is marked in the store's
//     records table (a completed marker in the load's scope; one
//     statement per batch on store/postgres, MarkBatch), and the caller's
//     function writes the rows whose keys were new. Any TxStore works
//     (store/postgres, store/sqlite, store/mysql); markers expire after
//     Options.Retention.
//   - loadpgx.Table, entity mode on PostgreSQL: the key and the
//     fingerprint are columns of the business table, its unique key on the
//     key column is the record, and a batch of new keys is one COPY (one
//     INSERT .. ON CONFLICT DO NOTHING when keys exist). No marker table,
//     nothing ever expires, and a keyed load runs near the speed of a plain
//     insert (see BenchmarkLoad1M in load/loadpgx).
//
// A file:
//
//	src, err := load.NewCSV(f, load.CSVOptions{Key: []string{"order_id"}})
//	orders := &loadpgx.Table{Name: "orders", KeyColumn: "order_id", FingerprintColumn: "load_fp", Columns: src.Header()}
//	l, err := load.New(entitypgx.NewStore(pool), orders, load.Options{
//		Scope:    "orders-import",
//		Progress: load.Terminal(os.Stderr), // 120000/1000000 rows (12.0%), 85310 rows/s: ...
//	})
//	sum, err := l.Run(ctx, src)
//	var ce *load.ConflictError
//	if errors.As(err, &ce) {
//		for _, c := range sum.Conflicts { log.Print(c) } // row 7 (line 8): key 42 exists with other content ...
//	}
//	fmt.Println(sum) // 1000 rows in 1.2s: 998 new, 0 duplicate, 2 conflict
//
// A query result or any other input is a Source (SourceFunc) that sets each
// Row's Key, Fingerprint and Values.
//
// The package imports the standard library and idem only; writers for a
// database live in their own packages (load/loadpgx).
package load
