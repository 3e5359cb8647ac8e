package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
)

func newResolveCmd() *cobra.Command {
	var (
		f           storeFlags
		complete    bool
		release     bool
		supersede   bool
		fingerprint string
		result      string
		retention   time.Duration
		yes         bool
		as          string
	)
	c := &cobra.Command{
		Use:   "resolve SCOPE KEY (--complete [--result R] | --release | --supersede --fingerprint FP)",
		Short: "Complete or release an in-progress record; accept a conflicting content as the key's new truth",
		Long: `resolve is the operator's answer to an in-progress record whose owner crashed
(stale) or that the park policy left for a human. Check whether the side
effect happened, then:

  --complete   it did: mark the key completed (duplicates will be skipped and
               get --result replayed)
  --release    it did not: give the key back, so the next delivery processes it

It also settles a conflict: a dead letter whose content differs from the one
the key was processed with. When the producer really did correct the message
under a reused id, --supersede --fingerprint FP (the dead letter's
Idem-Fingerprint, shown by 'idem dlq show') makes that content the key's
truth: the record is released with the new fingerprint, so replaying the dead
letter processes it once, and the content the key held before is the conflict
from then on. It asks for confirmation (--yes does not ask) and logs who did it
(--as, else the user running it) on stderr.

The record is read first and changed only with its current fencing token, so
a live owner that took the key over meanwhile is never overwritten.`,
		Example: `  idem resolve billing order-1042 --complete --store sqlite://idem.db
  idem resolve billing order-1042 --complete --result '{"charge":"ch_91"}'
  idem resolve mailer welcome/user-7 --release
  idem resolve billing order-1042 --supersede --fingerprint 9f2c… --as alice`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			switch n := btoi(complete) + btoi(release) + btoi(supersede); {
			case n == 0:
				return usagef("pass --complete or --release (or --supersede --fingerprint FP to settle a conflict)")
			case n > 1:
				return usagef("pass exactly one of --complete, --release or --supersede")
			}
			if !complete && c.Flags().Changed("result") {
				return usagef("--result goes with --complete")
			}
			if supersede && fingerprint == "" {
				return usagef("--supersede needs --fingerprint: the dead letter's %s ('idem dlq show ID' prints it)", idem.HeaderFingerprint)
			}
			if !supersede && fingerprint != "" {
				return usagef("--fingerprint goes with --supersede")
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
			if supersede {
				return supersedeRecord(ctx, c, h.Store, r, fingerprint, yes, who(as), f.json)
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
				return changedWhileResolving(key, r.Token)
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
	fl.BoolVar(&supersede, "supersede", false, "accept the content with --fingerprint as the key's truth (a conflict's dead letter)")
	fl.StringVar(&fingerprint, "fingerprint", "", "with --supersede: the dead letter's "+idem.HeaderFingerprint)
	fl.StringVar(&result, "result", "", "result to record with --complete (replayed to duplicates)")
	fl.DurationVar(&retention, "retention", idem.DefaultRetention, "retention of the completed record")
	fl.BoolVarP(&yes, "yes", "y", false, "with --supersede: do not ask for confirmation")
	fl.StringVar(&as, "as", "", "with --supersede: the operator's name in the log line (default: the user running idem)")
	return c
}

func changedWhileResolving(key idem.Key, token int64) error {
	return fmt.Errorf("record %s changed while resolving (another owner holds it now, token > %d); run 'idem show %s %s' and decide again",
		key, token, key.Scope, key.ID)
}

// supersedeRecord makes fp the content of r, the record as read, after
// showing both contents (where a guard kept copies: Options.KeepPayload)
// and asking, and logs who did it.
func supersedeRecord(ctx context.Context, c *cobra.Command, s idem.Store, r idem.Record, fp string, yes bool, by string, asJSON bool) error {
	key := r.Key()
	switch {
	case r.State == idem.StateInProgress:
		return fmt.Errorf("record %s is in_progress (token %d): an owner may be running; resolve it first (--complete or --release), then supersede", key, r.Token)
	case r.Fingerprint == fp:
		return fmt.Errorf("record %s already holds the content %s: nothing to supersede (replay the dead letter as it is)", key, fp)
	}
	if _, ok := s.(idem.Superseder); !ok {
		return fmt.Errorf("%w: %T", idem.ErrSupersedeUnsupported, s)
	}
	if !yes {
		w := c.ErrOrStderr()
		fmt.Fprintf(w, "Record %s: %s, token %d, %d attempts, first claimed %s.\n", key, r.State, r.Token, r.Attempts, r.CreatedAt.UTC().Format(time.RFC3339))
		showContent(ctx, w, s, key, "holds the key now", r.Fingerprint, "no copy kept (a guard with Options.KeepPayload keeps one)")
		showContent(ctx, w, s, key, "to hold it from now on", fp, "the dead letter's ('idem dlq show' prints it)")
		fmt.Fprintf(w, "Supersede: the key will be processed once more with the new content, and the old one will be a conflict. Do it as %s? [y/N] ", by)
		line, _ := bufio.NewReader(c.InOrStdin()).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(w, "Not superseded.")
			return silentError{code: exitFailure}
		}
	}
	err := idem.Supersede(ctx, s, idem.SupersedeRequest{Key: key, Token: r.Token, Fingerprint: fp, Now: time.Now()})
	if errors.Is(err, idem.ErrLeaseLost) {
		return changedWhileResolving(key, r.Token)
	}
	if err != nil {
		return fmt.Errorf("supersede %s: %w", key, err)
	}
	log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil))
	if asJSON {
		log = slog.New(slog.NewJSONHandler(c.ErrOrStderr(), nil))
	}
	log.Info("idem resolve superseded", "who", by, "scope", key.Scope, "key", key.ID, "token", r.Token, "from", r.Fingerprint, "to", fp)
	return printOut(c, asJSON, map[string]any{"scope": key.Scope, "id": key.ID, "action": "superseded", "token": r.Token,
		"from": r.Fingerprint, "to": fp, "who": by},
		fmt.Sprintf("Record %s superseded by %s: content %s holds the key now (released, token %d). Replay its dead letter to process it once; the content it held before (%s) is a conflict from now on.\n",
			key, by, fp, r.Token, r.Fingerprint))
}

// showContent prints the kept copy of key's content fp, or where to find
// it (none).
func showContent(ctx context.Context, w io.Writer, s idem.Store, key idem.Key, label, fp, none string) {
	p, cut, err := idem.KeptPayload(ctx, s, key, fp)
	switch {
	case err != nil:
		fmt.Fprintf(w, "  content %s (%s): %s\n", fp, label, none)
	case cut:
		fmt.Fprintf(w, "  content %s (%s), first %d bytes: %q…\n", fp, label, len(p), p)
	default:
		fmt.Fprintf(w, "  content %s (%s): %q\n", fp, label, p)
	}
}
