package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

func newSweepCmd() *cobra.Command {
	var (
		f     storeFlags
		batch int
	)
	c := &cobra.Command{
		Use:   "sweep",
		Short: "Delete expired records now and report how many",
		Long: `sweep deletes records whose retention has ended, in batches so claims are
never blocked for long, until none are left. Consumers usually run a sweeper
themselves (idem.Sweeper); this is the operator's manual run.`,
		Example: `  idem sweep --store sqlite://idem.db
  IDEM_STORE=redis://localhost:6379 idem sweep --batch 500 --json`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if batch <= 0 {
				return usagef("--batch must be positive")
			}
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, true)
			if err != nil {
				return err
			}
			defer h.Close()
			sw := idem.Sweeper{Store: h.Store, BatchSize: batch}
			n, err := sw.SweepOnce(ctx)
			if err != nil {
				return fmt.Errorf("sweep %s: %w (deleted %d before the error)", h.Redacted, err, n)
			}
			return printOut(c, f.json, map[string]any{"deleted": n},
				fmt.Sprintf("Deleted %d expired record%s.\n", n, plural(n)))
		},
	}
	f.add(c)
	c.Flags().IntVar(&batch, "batch", 1000, "records deleted per batch")
	return c
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
