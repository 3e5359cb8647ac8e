package load

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idemgo/idem"
)

// CSVOptions say how a CSV file's rows are keyed and what they carry.
// Columns are named by the file's header line.
type CSVOptions struct {
	// Key names the columns of the business key ("order_id"; several are
	// joined with JoinKey). A row with an empty key column is a *RowError.
	// Empty: a file without a business key, where each row is keyed by the
	// Hash of its Fingerprint columns, so an identical row is a duplicate
	// and a changed one is a new row (there are no conflicts).
	Key []string
	// Fingerprint names the columns whose content must not change under a
	// key: a row with a stored key and other values there is a conflict.
	// Default: every column. Leave out columns that may differ between
	// two exports of the same row (an export timestamp).
	Fingerprint []string
	// Columns names the columns handed to the writer as Row.Values, in
	// that order. Default: every column, in the file's order.
	Columns []string
	// Comma is the field separator; default ','.
	Comma rune
}

// CSV is a Source reading a CSV file with a header line. Values are the
// fields as strings.
type CSV struct {
	r      *csv.Reader
	header []string
	key    []int // column indexes
	fp     []int
	cols   []int
	n      int
	buf    []byte // hash's
	parts  []string
}

// NewCSV reads the header line of r and returns the source of its rows.
// Columns named in opts that the header lacks (or holds twice) are an error.
func NewCSV(r io.Reader, opts CSVOptions) (*CSV, error) {
	cr := csv.NewReader(r)
	if opts.Comma != 0 {
		cr.Comma = opts.Comma
	}
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("load: CSV input is empty (no header line)")
		}
		return nil, fmt.Errorf("load: CSV header: %w", err)
	}
	header = append([]string(nil), header...)
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte order mark
	}
	c := &CSV{r: cr, header: header}
	all := make([]int, len(header))
	for i := range all {
		all[i] = i
	}
	if c.key, err = c.indexes("Key", opts.Key, nil); err != nil {
		return nil, err
	}
	if c.fp, err = c.indexes("Fingerprint", opts.Fingerprint, all); err != nil {
		return nil, err
	}
	if c.cols, err = c.indexes("Columns", opts.Columns, all); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *CSV) indexes(field string, names []string, def []int) ([]int, error) {
	if len(names) == 0 {
		return def, nil
	}
	out := make([]int, len(names))
	for i, name := range names {
		out[i] = -1
		for j, h := range c.header {
			if h != name {
				continue
			}
			if out[i] >= 0 {
				return nil, fmt.Errorf("load: CSVOptions.%s: column %q appears twice in the header", field, name)
			}
			out[i] = j
		}
		if out[i] < 0 {
			return nil, fmt.Errorf("load: CSVOptions.%s: no column %q in the header %q", field, name, c.header)
		}
	}
	return out, nil
}

// Header returns the file's column names.
func (c *CSV) Header() []string { return append([]string(nil), c.header...) }

// Next reads the next row; io.EOF after the last one. A malformed line
// (an unclosed quote, a wrong number of fields) is an error naming its
// line.
func (c *CSV) Next(ctx context.Context) (Row, error) {
	if err := ctx.Err(); err != nil {
		return Row{}, err
	}
	rec, err := c.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Row{}, io.EOF
		}
		return Row{}, fmt.Errorf("load: CSV row %d: %w", c.n+1, err)
	}
	c.n++
	line, _ := c.r.FieldPos(0)
	row := Row{N: c.n, Line: line, Values: make([]any, len(c.cols))}
	for i, j := range c.cols {
		row.Values[i] = rec[j]
	}
	c.parts = c.parts[:0]
	for _, j := range c.fp {
		c.parts = append(c.parts, rec[j])
	}
	if len(c.key) == 0 {
		row.Key, c.buf = hash(c.buf, c.parts)
		return row, nil
	}
	row.Fingerprint, c.buf = hash(c.buf, c.parts)
	c.parts = c.parts[:0]
	for _, j := range c.key {
		if strings.TrimSpace(rec[j]) == "" {
			return Row{}, &RowError{Row: row.N, Line: line, Err: &idem.KeyError{
				Reason: fmt.Sprintf("key column %q is empty", c.header[j]), Err: idem.ErrNoKey}}
		}
		c.parts = append(c.parts, rec[j])
	}
	row.Key = JoinKey(c.parts...)
	return row, nil
}
