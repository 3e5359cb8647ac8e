package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

func newListCmd() *cobra.Command {
	var (
		f         storeFlags
		scope     string
		state     string
		stale     bool
		olderThan time.Duration
		limit     int
		after     string
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List records, filtered and paged",
		Long: `list prints records ordered by scope and id, one page at a time. Filters
combine: --stale selects in-progress records whose lease has ended (their
owner probably crashed), --older-than selects records created before now minus
the duration. When a page is full, the cursor of the next page is printed:
pass it to --after, with the same filters, to continue exactly where the page
stopped (the cursor is opaque; it names the page's last record, whatever its
id).`,
		Example: `  idem list --store sqlite://idem.db
  idem list --scope billing --state in_progress --stale
  idem list --older-than 24h --limit 500 --json
  idem list --scope billing --after AQdiaWxsaW5nb3JkZXItMTA0Mg`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			filter := idem.ListFilter{Scope: scope, Limit: limit}
			switch idem.State(state) {
			case "", idem.StateInProgress, idem.StateCompleted, idem.StateReleased:
				filter.State = idem.State(state)
			default:
				return usagef("--state %q: want in_progress, completed or released", state)
			}
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			if olderThan < 0 {
				return usagef("--older-than must not be negative")
			}
			cur, err := idem.ParseCursor(after)
			if err != nil {
				return usagef("--after %q: not a page cursor (pass the one a previous page printed): %v", after, err)
			}
			filter.After = cur
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, true)
			if err != nil {
				return err
			}
			defer h.Close()
			in, err := inspector(h, "list")
			if err != nil {
				return err
			}
			now := time.Now()
			if stale {
				filter.StaleAt = now
			}
			if olderThan > 0 {
				filter.CreatedBefore = now.Add(-olderThan)
			}
			recs, err := in.List(ctx, filter)
			if err != nil {
				return fmt.Errorf("list %s: %w", h.Redacted, err)
			}
			var next *idem.Record
			if len(recs) == limit {
				next = &recs[len(recs)-1]
			}
			if f.json {
				out := struct {
					Records []recordJSON `json:"records"`
					Next    *nextPage    `json:"next,omitempty"`
				}{Records: make([]recordJSON, 0, len(recs))}
				for _, r := range recs {
					out.Records = append(out.Records, toJSON(r, now))
				}
				if next != nil {
					out.Next = &nextPage{After: next.Cursor()}
				}
				return writeJSON(c.OutOrStdout(), out)
			}
			w := c.OutOrStdout()
			if len(recs) == 0 {
				fmt.Fprintf(w, "No records match (%s).\n", where(h))
				return nil
			}
			tw := newTable(w)
			fmt.Fprintln(tw, "SCOPE\tID\tSTATE\tTOKEN\tATTEMPTS\tCREATED\tLEASE\tEXPIRES")
			for _, r := range recs {
				lease := "-"
				if r.State == idem.StateInProgress {
					lease = ago(r.LeaseUntil, now)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Scope, displayID(r), stateLabel(r, now),
					r.Token, r.Attempts, ago(r.CreatedAt, now), lease, ago(r.ExpiresAt, now))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != nil {
				fmt.Fprintf(w, "\n%d records shown; next page: --after %s\n", len(recs), next.Cursor())
			}
			return nil
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&scope, "scope", "", "only this scope (consumer identity)")
	fl.StringVar(&state, "state", "", "only this state: in_progress, completed or released")
	fl.BoolVar(&stale, "stale", false, "only in-progress records whose lease has ended")
	fl.DurationVar(&olderThan, "older-than", 0, "only records created longer ago than this (e.g. 24h)")
	fl.IntVar(&limit, "limit", 50, "records per page")
	fl.StringVar(&after, "after", "", "continue after this page cursor (the one the previous page printed)")
	return c
}

// nextPage is how --json says where the next page starts: pass After to
// --after.
type nextPage struct {
	After idem.Cursor `json:"after"`
}
