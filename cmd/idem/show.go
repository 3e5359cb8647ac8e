package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

func newShowCmd() *cobra.Command {
	var f storeFlags
	c := &cobra.Command{
		Use:   "show SCOPE KEY",
		Short: "Show one record",
		Long: `show prints the record stored for KEY in SCOPE: its state, fencing token,
attempts, lease and retention, fingerprint and recorded result.`,
		Example: `  idem show billing order-1042 --store sqlite://idem.db
  IDEM_STORE=redis://localhost:6379 idem show mailer welcome/user-7 --json`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, true)
			if err != nil {
				return err
			}
			defer h.Close()
			key := idem.Key{Scope: a[0], ID: a[1]}
			if err := key.Validate(); err != nil {
				return usageError{err}
			}
			r, err := h.Store.Get(ctx, key)
			if errors.Is(err, idem.ErrNotFound) {
				return fmt.Errorf("no record for key %q in scope %q (it was never processed, or was swept; 'idem list --scope %s' shows what exists)",
					key.ID, key.Scope, key.Scope)
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			now := time.Now()
			if f.json {
				return writeJSON(c.OutOrStdout(), toJSON(r, now))
			}
			return printRecord(c, r, now)
		},
	}
	f.add(c)
	return c
}

func printRecord(c *cobra.Command, r idem.Record, now time.Time) error {
	tw := newTable(c.OutOrStdout())
	j := toJSON(r, now)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("scope", r.Scope)
	row("id", r.Key().ID)
	if r.DisplayID != "" && r.DisplayID != r.ID {
		row("stored id", r.ID)
	}
	row("state", stateLabel(r, now))
	row("token", fmt.Sprint(r.Token))
	row("attempts", fmt.Sprint(r.Attempts))
	if r.State == idem.StateInProgress {
		row("lease until", stamp(r.LeaseUntil, now))
	}
	row("expires at", stamp(r.ExpiresAt, now))
	row("created at", stamp(r.CreatedAt, now))
	row("updated at", stamp(r.UpdatedAt, now))
	fp := r.Fingerprint
	if fp == "" {
		fp = "-"
	}
	row("fingerprint", fp)
	switch {
	case j.Result != "":
		row("result", fmt.Sprintf("%q", j.Result))
	case j.ResultB64 != "":
		row("result (base64)", j.ResultB64)
	default:
		row("result", "-")
	}
	return tw.Flush()
}

func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + ago(t, now) + ")"
}
