package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newStatsCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "stats",
		Short: "Count records by scope and state",
		Long: `stats counts each scope's records by state, with the in-progress records whose
lease has ended (stale: their owner probably crashed), the expired records
waiting for a sweep, and the age of the oldest in-progress record.`,
		Example: `  idem stats --store sqlite://idem.db
  IDEM_STORE=postgres://localhost/app idem stats --json`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, true)
			if err != nil {
				return err
			}
			defer h.Close()
			in, err := inspector(h, "stats")
			if err != nil {
				return err
			}
			now := time.Now()
			stats, err := in.Stats(ctx, now)
			if err != nil {
				return fmt.Errorf("stats %s: %w", h.Redacted, err)
			}
			if f.json {
				type row struct {
					Scope            string     `json:"scope"`
					InProgress       int64      `json:"in_progress"`
					Stale            int64      `json:"stale"`
					Completed        int64      `json:"completed"`
					Released         int64      `json:"released"`
					Expired          int64      `json:"expired"`
					OldestInProgress *time.Time `json:"oldest_in_progress,omitempty"`
				}
				out := struct {
					Scopes []row `json:"scopes"`
				}{Scopes: []row{}}
				for _, s := range stats {
					out.Scopes = append(out.Scopes, row{s.Scope, s.InProgress, s.Stale, s.Completed, s.Released, s.Expired, tptr(s.OldestInProgress)})
				}
				return writeJSON(c.OutOrStdout(), out)
			}
			w := c.OutOrStdout()
			if len(stats) == 0 {
				fmt.Fprintf(w, "The store holds no records (%s).\n", where(h))
				return nil
			}
			tw := newTable(w)
			fmt.Fprintln(tw, "SCOPE\tIN_PROGRESS\tSTALE\tCOMPLETED\tRELEASED\tEXPIRED\tOLDEST_IN_PROGRESS")
			for _, s := range stats {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Scope, s.InProgress, s.Stale, s.Completed, s.Released, s.Expired,
					ago(s.OldestInProgress, now))
			}
			return tw.Flush()
		},
	}
	f.add(c)
	return c
}
