package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newMigrateCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the store's schema",
		Long: `migrate creates the tables and indexes idem needs, or upgrades them to this
version. It is safe to run more than once and while consumers are running.`,
		Example: `  idem migrate --store sqlite://idem.db
  idem migrate --store 'postgres://app@db.internal/app?sslmode=require'`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, false)
			if err != nil {
				return err
			}
			defer h.Close()
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
	return c
}
