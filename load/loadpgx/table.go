// Package loadpgx is package load's writer for PostgreSQL tables that keep
// each row's key and fingerprint beside its columns (entity mode): the
// table's unique key on the key column is the only record of what was
// loaded, so a load costs one INSERT per batch and no marker table.
//
//	orders := &loadpgx.Table{Name: "orders", KeyColumn: "order_id", FingerprintColumn: "load_fp",
//		Columns: []string{"order_id", "customer", "amount_cents"}}
//	l, err := load.New(entitypgx.NewStore(pool), orders, load.Options{Scope: "orders-import"})
//	src, err := load.NewCSV(f, load.CSVOptions{Key: []string{"order_id"}, Columns: orders.Columns})
//	sum, err := l.Run(ctx, src)
package loadpgx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/load"
)

// ErrInvalidTable is wrapped by errors about a Table's names.
var ErrInvalidTable = errors.New("loadpgx: invalid table")

// ErrKeyForm means the key column stores a row's key in another text form
// than the row gave it (a bigint column given "042" stores 42), so the load
// could not tell which rows it wrote. Give keys in the column's text form.
var ErrKeyForm = errors.New("loadpgx: key not in the key column's text form")

// Table is a load.Writer[pgx.Tx] for a table with a unique constraint (or
// primary key) on KeyColumn and, when FingerprintColumn is set, a text
// column holding each row's fingerprint. A batch is one
// INSERT .. SELECT FROM unnest(..) ON CONFLICT (key) DO NOTHING RETURNING
// key: rows of new keys are written, and when some keys exist one more
// statement reads their fingerprints, so that the load reports them as
// duplicates or conflicts. Nothing stored is ever updated.
//
// Values are sent as text and cast to the columns' types, which Table reads
// from the catalog on first use (so a value the column cannot take is
// PostgreSQL's data error, which fails the batch). Use a *Table, which
// caches its statements; it is safe for concurrent use.
type Table struct {
	// Name is the table, optionally schema-qualified ("sales.orders").
	Name string
	// KeyColumn holds Row.Key under a unique constraint. When it is also
	// one of Columns, its value comes from Row.Values and must be the key
	// (as CSV gives it for a one-column Key); otherwise Row.Key is written
	// to it.
	KeyColumn string
	// FingerprintColumn holds Row.Fingerprint (text). Empty: rows whose key
	// exists are duplicates whatever their content.
	FingerprintColumn string
	// Columns are the columns Row.Values fill, in order.
	Columns []string

	mu    sync.Mutex
	stmts *statements
	// copyPaused counts the batches that skip the COPY after one met a
	// stored key: reloads come in runs of duplicates.
	copyPaused atomic.Int32
}

// copyPause is how many batches go straight to INSERT .. ON CONFLICT after a
// COPY met a stored key: a reload of a whole file then wastes one COPY in
// copyPause+1 batches, not every one.
const copyPause = 32

var _ load.Writer[pgx.Tx] = (*Table)(nil)

type statements struct {
	copy     string
	insert   string
	existing string
	keyAt    int // index of KeyColumn in Columns, -1 when written from Row.Key
	width    int // arrays in insert: the columns, plus the key and fingerprint when not among them
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func quote(name string) string { return `"` + name + `"` }

func (t *Table) qualified() (string, error) {
	parts := strings.Split(t.Name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: name %q has more than a schema and a table", ErrInvalidTable, t.Name)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("%w: name %q is not a plain identifier", ErrInvalidTable, t.Name)
		}
		parts[i] = quote(p)
	}
	return strings.Join(parts, "."), nil
}

// prepare validates the names, reads the column types and builds the
// statements, once.
func (t *Table) prepare(ctx context.Context, tx pgx.Tx) (*statements, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stmts != nil {
		return t.stmts, nil
	}
	name, err := t.qualified()
	if err != nil {
		return nil, err
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("%w: %s has no Columns", ErrInvalidTable, t.Name)
	}
	cols := append([]string(nil), t.Columns...)
	keyAt := -1
	for i, c := range cols {
		if c == t.KeyColumn {
			keyAt = i
		}
		if c == t.FingerprintColumn && c != "" {
			return nil, fmt.Errorf("%w: FingerprintColumn %q is also in Columns", ErrInvalidTable, c)
		}
	}
	if keyAt < 0 {
		cols = append(cols, t.KeyColumn)
	}
	if t.FingerprintColumn != "" {
		cols = append(cols, t.FingerprintColumn)
	}
	seen := map[string]bool{}
	for _, c := range cols {
		if !identRE.MatchString(c) {
			return nil, fmt.Errorf("%w: column %q is not a plain identifier", ErrInvalidTable, c)
		}
		if seen[c] {
			return nil, fmt.Errorf("%w: column %q named twice", ErrInvalidTable, c)
		}
		seen[c] = true
	}
	types := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, name)
	if err != nil {
		return nil, fmt.Errorf("loadpgx: columns of %s: %w", t.Name, err)
	}
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			rows.Close()
			return nil, err
		}
		types[col] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loadpgx: columns of %s: %w", t.Name, err)
	}
	var (
		names, arrays, casts []string
		keyCast              string
	)
	for i, c := range cols {
		typ, ok := types[c]
		if !ok {
			return nil, fmt.Errorf("%w: %s has no column %q", ErrInvalidTable, t.Name, c)
		}
		u := "u.c" + strconv.Itoa(i)
		names = append(names, quote(c))
		arrays = append(arrays, "$"+strconv.Itoa(i+1)+"::text[]")
		casts = append(casts, u+"::"+typ)
		if c == t.KeyColumn {
			keyCast = "::" + typ
		}
	}
	aliases := make([]string, len(cols))
	for i := range aliases {
		aliases[i] = "c" + strconv.Itoa(i)
	}
	key := quote(t.KeyColumn)
	fp := "NULL::text"
	if t.FingerprintColumn != "" {
		fp = "t." + quote(t.FingerprintColumn)
	}
	t.stmts = &statements{
		copy: fmt.Sprintf("COPY %s (%s) FROM STDIN", name, strings.Join(names, ", ")),
		insert: fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS u(%s) ON CONFLICT (%s) DO NOTHING RETURNING %s::text",
			name, strings.Join(names, ", "), strings.Join(casts, ", "), strings.Join(arrays, ", "),
			strings.Join(aliases, ", "), key, key),
		existing: fmt.Sprintf("SELECT u.i, %s FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) JOIN %s t ON t.%s = u.k%s",
			fp, name, key, keyCast),
		keyAt: keyAt,
		width: len(cols),
	}
	return t.stmts, nil
}

// WriteBatch implements load.Writer: it inserts the rows of new keys (in
// the batch's key order, so that concurrent loads lock shared keys in one
// order) and reads the stored fingerprint of the others.
func (t *Table) WriteBatch(ctx context.Context, tx pgx.Tx, b *load.Batch) ([]idem.Claim, error) {
	st, err := t.prepare(ctx, tx)
	if err != nil {
		return nil, err
	}
	rows := b.Rows
	arrays := make([][]pgtype.Text, st.width)
	for c := range arrays {
		arrays[c] = make([]pgtype.Text, len(rows))
	}
	for j := range rows {
		r := &rows[j]
		if len(r.Values) != len(t.Columns) {
			return nil, fmt.Errorf("loadpgx: row %d has %d values for %d columns of %s", r.N, len(r.Values), len(t.Columns), t.Name)
		}
		for c, v := range r.Values {
			if arrays[c][j], err = text(v); err != nil {
				return nil, fmt.Errorf("loadpgx: row %d, column %s: %w", r.N, t.Columns[c], err)
			}
		}
		next := len(t.Columns)
		if st.keyAt < 0 {
			arrays[next][j] = pgtype.Text{String: r.Key, Valid: true}
			next++
		} else if k := arrays[st.keyAt][j]; !k.Valid || k.String != r.Key {
			return nil, fmt.Errorf("loadpgx: row %d: key %q differs from its %s value", r.N, r.Key, t.KeyColumn)
		}
		if t.FingerprintColumn != "" {
			arrays[next][j] = pgtype.Text{String: r.Fingerprint, Valid: r.Fingerprint != ""}
		}
	}
	claims := make([]idem.Claim, len(rows))
	if load.Disposable(ctx) && t.copyAllowed() {
		// The batch's transaction is its own: COPY, the cheapest way in,
		// writes a batch of new keys; one stored key fails it, and the
		// loader runs the batch again with the statements below.
		err := t.copy(ctx, tx, st.copy, arrays, len(rows))
		if isUniqueViolation(err) {
			t.copyPaused.Store(copyPause)
			return nil, fmt.Errorf("%w: %w", load.ErrRetryBatch, err)
		}
		if err != nil {
			return nil, fmt.Errorf("loadpgx: copy into %s: %w", t.Name, err)
		}
		for i := range rows {
			claims[i] = claimed(idem.ClaimAcquired, rows[i].Fingerprint)
		}
		return claims, nil
	}
	args := make([]any, len(arrays))
	for c := range arrays {
		args[c] = arrays[c]
	}
	written, err := t.insert(ctx, tx, st.insert, args, rows, claims)
	if err != nil {
		return nil, err
	}
	if written < len(rows) {
		if err := t.existing(ctx, tx, st.existing, rows, claims); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

// copyAllowed reports whether this batch may try the COPY, counting down a
// pause.
func (t *Table) copyAllowed() bool {
	for {
		n := t.copyPaused.Load()
		if n <= 0 {
			return true
		}
		if t.copyPaused.CompareAndSwap(n, n-1) {
			return false
		}
	}
}

// copy writes the batch's columns (in arrays, row j of each) with COPY in
// text format.
func (t *Table) copy(ctx context.Context, tx pgx.Tx, query string, arrays [][]pgtype.Text, n int) error {
	size := 0
	for c := range arrays {
		for _, v := range arrays[c] {
			size += len(v.String) + 1
		}
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+size/16))
	for j := 0; j < n; j++ {
		for c := range arrays {
			if c > 0 {
				buf.WriteByte('\t')
			}
			v := arrays[c][j]
			if !v.Valid {
				buf.WriteString(`\N`)
				continue
			}
			copyEscape(buf, v.String)
		}
		buf.WriteByte('\n')
	}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, buf, query)
	if err == nil && tag.RowsAffected() != int64(n) {
		err = fmt.Errorf("copied %d rows of %d", tag.RowsAffected(), n)
	}
	return err
}

// copyEscape writes s in COPY's text format: backslash, tab, newline and
// carriage return escaped.
func copyEscape(buf *bytes.Buffer, s string) {
	if !strings.ContainsAny(s, "\\\t\n\r") {
		buf.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteByte(c)
		}
	}
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// insert runs the batch's insert and fills the claims of the rows it wrote.
func (t *Table) insert(ctx context.Context, tx pgx.Tx, query string, args []any, rows []load.Row, claims []idem.Claim) (int, error) {
	byKey := make(map[string]int, len(rows))
	for i, r := range rows {
		byKey[r.Key] = i
	}
	res, err := tx.Query(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("loadpgx: insert into %s: %w", t.Name, err)
	}
	defer res.Close()
	n := 0
	var k string
	for res.Next() {
		if err := res.Scan(&k); err != nil {
			return 0, err
		}
		i, ok := byKey[k]
		if !ok {
			return 0, fmt.Errorf("%w: %s stored a row as %q", ErrKeyForm, t.KeyColumn, k)
		}
		claims[i] = claimed(idem.ClaimAcquired, rows[i].Fingerprint)
		n++
	}
	if err := res.Err(); err != nil {
		return 0, fmt.Errorf("loadpgx: insert into %s: %w", t.Name, err)
	}
	return n, nil
}

// existing reads the stored fingerprints of the rows insert did not write.
func (t *Table) existing(ctx context.Context, tx pgx.Tx, query string, rows []load.Row, claims []idem.Claim) error {
	var keys []string
	var idx []int
	for i, c := range claims {
		if c.Outcome == 0 {
			keys = append(keys, rows[i].Key)
			idx = append(idx, i)
		}
	}
	res, err := tx.Query(ctx, query, keys)
	if err != nil {
		return fmt.Errorf("loadpgx: read %s: %w", t.Name, err)
	}
	defer res.Close()
	var (
		ord int64
		fp  *string
	)
	for res.Next() {
		if err := res.Scan(&ord, &fp); err != nil {
			return err
		}
		i := idx[ord-1] // by position: a key in another text form than stored ("042" for 42) is found too
		f := ""
		if fp != nil {
			f = *fp
		}
		claims[i] = claimed(idem.ClaimDuplicate, f)
	}
	if err := res.Err(); err != nil {
		return fmt.Errorf("loadpgx: read %s: %w", t.Name, err)
	}
	for _, i := range idx {
		if claims[i].Outcome == 0 {
			// Neither inserted nor found: deleted by another transaction
			// between the two statements. The batch rolls back; run the
			// load again.
			return fmt.Errorf("loadpgx: row %d: key %q neither inserted nor found in %s (deleted meanwhile?); run the load again",
				rows[i].N, rows[i].Key, t.Name)
		}
	}
	return nil
}

// claimed is the claim a row stands for: a completed entity whose content
// is fingerprint (the table keeps nothing else a record has).
func claimed(outcome idem.ClaimOutcome, fingerprint string) idem.Claim {
	return idem.Claim{Outcome: outcome, Record: idem.Record{State: idem.StateCompleted, Fingerprint: fingerprint}}
}

// text renders a value as the text PostgreSQL casts to the column's type;
// nil is NULL.
func text(v any) (pgtype.Text, error) {
	var s string
	switch v := v.(type) {
	case nil:
		return pgtype.Text{}, nil
	case string:
		s = v
	case *string:
		if v == nil {
			return pgtype.Text{}, nil
		}
		s = *v
	case []byte:
		s = string(v)
	case int:
		s = strconv.Itoa(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	case int32:
		s = strconv.FormatInt(int64(v), 10)
	case uint64:
		s = strconv.FormatUint(v, 10)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		s = strconv.FormatBool(v)
	case time.Time:
		s = v.Format(time.RFC3339Nano)
	case fmt.Stringer:
		s = v.String()
	default:
		return pgtype.Text{}, fmt.Errorf("cannot send %T as text", v)
	}
	return pgtype.Text{String: s, Valid: true}, nil
}
