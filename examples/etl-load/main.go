// Command etl-load loads a CSV export of orders into PostgreSQL with a key
// per row (the order id) and a fingerprint of its content kept in the row:
// loading the same file again writes nothing, and a file that overlaps an
// earlier one loads its new orders and reports every order whose content
// changed, by row and line, without touching the stored one.
//
//	IDEM_POSTGRES_URL=postgres://localhost/shop go run . -file orders.csv
//
// The file has a header line: order_id,customer,amount_cents,currency.
// Progress goes to stderr; the summary and the conflicts to stdout. The exit
// status is 3 when rows conflicted (everything else was loaded).
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/load/loadpgx"
)

type config struct {
	PostgresURL string
	File        string
	Table       string    // created when missing
	Out         io.Writer // the summary and the conflicts
	Progress    io.Writer // the status line; nil: none
}

func main() {
	cfg := config{Out: os.Stdout, Progress: os.Stderr}
	flag.StringVar(&cfg.PostgresURL, "postgres", os.Getenv("IDEM_POSTGRES_URL"), "PostgreSQL URL")
	flag.StringVar(&cfg.File, "file", "orders.csv", "CSV file to load")
	flag.StringVar(&cfg.Table, "table", "orders", "table to load into")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := run(ctx, cfg)
	switch {
	case errors.Is(err, idem.ErrConflict):
		os.Exit(3)
	case err != nil:
		log.Fatal(err)
	}
}

// run loads cfg.File into cfg.Table. An interrupted load keeps the batches
// it committed; running it again goes on from there.
func run(ctx context.Context, cfg config) (load.Summary, error) {
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return load.Summary{}, err
	}
	defer pool.Close()
	// The order id is the primary key and the row's key; load_fp holds the
	// fingerprint of the row's content.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+cfg.Table+` (
		order_id     bigint PRIMARY KEY,
		customer     text   NOT NULL,
		amount_cents bigint NOT NULL,
		currency     text   NOT NULL,
		load_fp      text   NOT NULL)`); err != nil {
		return load.Summary{}, err
	}
	f, err := os.Open(cfg.File)
	if err != nil {
		return load.Summary{}, err
	}
	defer f.Close()
	total, err := countRows(f) // for the progress line's done/total
	if err != nil {
		return load.Summary{}, err
	}
	src, err := load.NewCSV(f, load.CSVOptions{Key: []string{"order_id"}})
	if err != nil {
		return load.Summary{}, err
	}
	orders := &loadpgx.Table{Name: cfg.Table, KeyColumn: "order_id", FingerprintColumn: "load_fp", Columns: src.Header()}
	opts := load.Options{
		Scope: "orders-import",
		Total: total,
		OnConflict: func(c load.Conflict) {
			fmt.Fprintln(cfg.Out, "conflict:", c)
		},
	}
	if cfg.Progress != nil {
		opts.Progress = load.Terminal(cfg.Progress)
	}
	l, err := load.New(entitypgx.NewStore(pool), orders, opts)
	if err != nil {
		return load.Summary{}, err
	}
	sum, err := l.Run(ctx, src)
	fmt.Fprintf(cfg.Out, "%s: %s\n", cfg.File, sum)
	return sum, err
}

// countRows counts the CSV rows of f after its header and rewinds it.
func countRows(f *os.File) (int, error) {
	r := csv.NewReader(f)
	r.ReuseRecord = true
	n := -1 // the header
	for {
		_, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			break // the load reports it, with its row
		}
		n++
	}
	_, err := f.Seek(0, io.SeekStart)
	return max(n, 0), err
}
