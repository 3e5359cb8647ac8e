package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

// schemaChecker is implemented by the stores whose schema migrate makes:
// CheckSchema returns an *idem.SchemaError naming what is missing, changing
// nothing.
type schemaChecker interface {
	CheckSchema(ctx context.Context) error
}

func newMigrateCmd() *cobra.Command {
	var (
		f     storeFlags
		check bool
	)
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the store's schema",
		Long: `migrate creates the tables and indexes idem needs, or upgrades them to this
version. It is safe to run more than once and while consumers are running.
It believes the schema over its own bookkeeping: a records table or a sweep
index dropped since the last run is made again.

With --check it changes nothing: it prints one line per missing object
(table, index) and exits 1 when anything is missing, 0 when the schema is
whole.`,
		Example: `  idem migrate --store sqlite://idem.db
  idem migrate --store 'postgres://app@db.internal/app?sslmode=require'
  idem migrate --check --store 'mysql://root@localhost/test'`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, false)
			if err != nil {
				return err
			}
			defer h.Close()
			if check {
				return checkSchema(ctx, c, f.json, h.Redacted, h.Scheme, h.Native)
			}
			if h.Migrate == nil {
				return printOut(c, f.json, map[string]any{"store": h.Redacted, "migrated": false},
					fmt.Sprintf("The %s store has no schema; nothing to migrate.\n", h.Scheme))
			}
			if err := h.Migrate(ctx); err != nil {
				return fmt.Errorf("migrate %s: %w", h.Redacted, err)
			}
			return printOut(c, f.json, map[string]any{"store": h.Redacted, "migrated": true},
				fmt.Sprintf("Schema of %s is up to date.\n", h.Redacted))
		},
	}
	f.add(c)
	c.Flags().BoolVar(&check, "check", false, "report missing tables and indexes (exit 1) without changing anything")
	return c
}

// checkSchema is migrate --check: a line per missing object, exit status 1
// when there is any.
func checkSchema(ctx context.Context, c *cobra.Command, asJSON bool, where, scheme string, native any) error {
	sc, ok := native.(schemaChecker)
	if !ok {
		return printOut(c, asJSON, map[string]any{"store": where, "missing": []string{}},
			fmt.Sprintf("The %s store has no schema; nothing to check.\n", scheme))
	}
	err := sc.CheckSchema(ctx)
	var se *idem.SchemaError
	if err != nil && !errors.As(err, &se) {
		return fmt.Errorf("check %s: %w", where, err)
	}
	if se == nil {
		return printOut(c, asJSON, map[string]any{"store": where, "missing": []string{}},
			fmt.Sprintf("Schema of %s is whole.\n", where))
	}
	var b strings.Builder
	for _, m := range se.Missing {
		fmt.Fprintf(&b, "missing: %s\n", m)
	}
	fmt.Fprintf(&b, "Schema of %s has drifted; run idem migrate to recreate what is missing.\n", where)
	if err := printOut(c, asJSON, map[string]any{"store": where, "missing": se.Missing}, b.String()); err != nil {
		return err
	}
	return silentError{code: exitFailure}
}
