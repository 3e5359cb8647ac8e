package load_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/load"
)

func readAll(t *testing.T, src load.Source) ([]load.Row, error) {
	t.Helper()
	var out []load.Row
	for {
		r, err := src.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func TestCSV(t *testing.T) {
	in := "\ufefforder_id,customer,amount,exported_at\n" +
		"42,alice,1500,2030-01-01\n" +
		"43,\"bob\nsmith\",700,2030-01-01\n" + // a quoted field over two lines
		"44,carol,990,2030-01-01\n"
	src, err := load.NewCSV(strings.NewReader(in), load.CSVOptions{
		Key:         []string{"order_id"},
		Fingerprint: []string{"order_id", "customer", "amount"}, // not the export time
		Columns:     []string{"order_id", "customer", "amount"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := src.Header(); strings.Join(h, ",") != "order_id,customer,amount,exported_at" {
		t.Errorf("header %q (the byte order mark must go)", h)
	}
	rows, err := readAll(t, src)
	if err != nil || len(rows) != 3 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	r := rows[1]
	if r.N != 2 || r.Line != 3 || r.Key != "43" || r.Fingerprint != load.Hash("43", "bob\nsmith", "700") ||
		len(r.Values) != 3 || r.Values[1] != "bob\nsmith" {
		t.Errorf("row 2: %+v", r)
	}
	if rows[2].Line != 5 {
		t.Errorf("row 3 starts on line %d, want 5", rows[2].Line)
	}

	// Another export time, same content: same fingerprint.
	again, _ := load.NewCSV(strings.NewReader("order_id,customer,amount,exported_at\n42,alice,1500,2030-02-01\n"),
		load.CSVOptions{Key: []string{"order_id"}, Fingerprint: []string{"order_id", "customer", "amount"}})
	if rs, _ := readAll(t, again); rs[0].Fingerprint != rows[0].Fingerprint || len(rs[0].Values) != 4 {
		t.Errorf("re-export: %+v", rs[0])
	}
}

func TestCSVKeys(t *testing.T) {
	in := "tenant;invoice;total\nacme;7;10\nacme;7;10\nacme;8;10\n"
	src, err := load.NewCSV(strings.NewReader(in), load.CSVOptions{Comma: ';', Key: []string{"tenant", "invoice"}})
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := readAll(t, src)
	if rows[0].Key != "acme|7" || rows[2].Key != "acme|8" {
		t.Errorf("composite keys %q %q", rows[0].Key, rows[2].Key)
	}
	// No business key: the content is the key, and there are no conflicts.
	src, _ = load.NewCSV(strings.NewReader(in), load.CSVOptions{Comma: ';'})
	rows, _ = readAll(t, src)
	if rows[0].Key != rows[1].Key || rows[0].Key == rows[2].Key || rows[0].Key != load.Hash("acme", "7", "10") || rows[0].Fingerprint != "" {
		t.Errorf("content keys: %+v", rows)
	}
}

func TestCSVErrors(t *testing.T) {
	for name, c := range map[string]struct {
		in   string
		opts load.CSVOptions
	}{
		"empty":          {"", load.CSVOptions{}},
		"unknown key":    {"a,b\n", load.CSVOptions{Key: []string{"id"}}},
		"unknown column": {"a,b\n", load.CSVOptions{Columns: []string{"a", "c"}}},
		"ambiguous":      {"a,a\n", load.CSVOptions{Key: []string{"a"}}},
	} {
		if _, err := load.NewCSV(strings.NewReader(c.in), c.opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	src, _ := load.NewCSV(strings.NewReader("id,v\n1,a\n ,b\n"), load.CSVOptions{Key: []string{"id"}})
	_, err := readAll(t, src)
	var re *load.RowError
	if !errors.As(err, &re) || re.Row != 2 || re.Line != 3 || !errors.Is(err, idem.ErrNoKey) || !strings.Contains(err.Error(), `key column "id" is empty`) {
		t.Errorf("empty key column: %v", err)
	}
	src, _ = load.NewCSV(strings.NewReader("id,v\n1,a\n2,b,c\n"), load.CSVOptions{Key: []string{"id"}})
	if _, err := readAll(t, src); err == nil || !strings.Contains(err.Error(), "row 2") {
		t.Errorf("wrong field count: %v", err)
	}
}
