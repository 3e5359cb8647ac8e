package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

func newResolveCmd() *cobra.Command {
	var (
		f         storeFlags
		complete  bool
		release   bool
		result    string
		retention time.Duration
	)
	c := &cobra.Command{
		Use:   "resolve SCOPE KEY (--complete [--result R] | --release)",
		Short: "Complete or release an in-progress record (the answer to a parked or stale record)",
		Long: `resolve is the operator's answer to an in-progress record whose owner crashed
(stale) or that the park policy left for a human. Check whether the side
effect happened, then:

  --complete   it did: mark the key completed (duplicates will be skipped and
               get --result replayed)
  --release    it did not: give the key back, so the next delivery processes it

The record is read first and changed only with its current fencing token, so
a live owner that took the key over meanwhile is never overwritten.`,
		Example: `  idem resolve billing order-1042 --complete --store sqlite://idem.db
  idem resolve billing order-1042 --complete --result '{"charge":"ch_91"}'
  idem resolve mailer welcome/user-7 --release`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			if complete == release {
				return usagef("pass exactly one of --complete or --release")
			}
			if release && c.Flags().Changed("result") {
				return usagef("--result goes with --complete")
			}
			if retention <= 0 {
				return usagef("--retention must be positive")
			}
			key := idem.Key{Scope: a[0], ID: a[1]}
			if err := key.Validate(); err != nil {
				return usageError{err}
			}
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			h, err := f.open(ctx, true)
			if err != nil {
				return err
			}
			defer h.Close()
			r, err := h.Store.Get(ctx, key)
			if errors.Is(err, idem.ErrNotFound) {
				return fmt.Errorf("no record for key %q in scope %q: nothing to resolve", key.ID, key.Scope)
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			if r.State != idem.StateInProgress {
				return fmt.Errorf("record %s is %s, not in_progress: nothing to resolve", key, r.State)
			}
			now := time.Now()
			action := "released"
			if complete {
				action = "completed"
				err = h.Store.Complete(ctx, idem.CompleteRequest{Key: key, Token: r.Token, Result: []byte(result), Now: now, ExpiresAt: now.Add(retention)})
			} else {
				err = h.Store.Release(ctx, idem.ReleaseRequest{Key: key, Token: r.Token, Now: now})
			}
			if errors.Is(err, idem.ErrLeaseLost) {
				return fmt.Errorf("record %s changed while resolving (another owner holds it now, token > %d); run 'idem show %s %s' and decide again",
					key, r.Token, key.Scope, key.ID)
			}
			if err != nil {
				return fmt.Errorf("resolve %s: %w", key, err)
			}
			return printOut(c, f.json, map[string]any{"scope": key.Scope, "id": key.ID, "action": action, "token": r.Token},
				fmt.Sprintf("Record %s %s (token %d).\n", key, action, r.Token))
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.BoolVar(&complete, "complete", false, "mark the key completed: its side effect happened")
	fl.BoolVar(&release, "release", false, "give the key back: its side effect did not happen")
	fl.StringVar(&result, "result", "", "result to record with --complete (replayed to duplicates)")
	fl.DurationVar(&retention, "retention", idem.DefaultRetention, "retention of the completed record")
	return c
}
