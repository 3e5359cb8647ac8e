package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/outbox"
	outboxmysql "github.com/idemgo/idem/outbox/mysql"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
	outboxsqlite "github.com/idemgo/idem/outbox/sqlite"
)

// outboxFlags are the flags every outbox command shares: the store's
// flags (the database's DSN) and the outbox table in it.
type outboxFlags struct {
	storeFlags
	table string
}

func (f *outboxFlags) add(c *cobra.Command) {
	f.storeFlags.add(c)
	c.Flags().StringVar(&f.table, "table", "idem_outbox", "the outbox table (Options.Table of the service's outbox store)")
}

// outboxStore is an outbox as the commands need it.
type outboxStore interface {
	outbox.Store
	outbox.Inspector
}

// open opens the database of the DSN and the outbox table in it, and
// checks that the table answers.
func (f *outboxFlags) open(ctx context.Context) (*dsn.Handle, outboxStore, error) {
	h, err := f.storeFlags.open(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	var s outboxStore
	switch {
	case h.PG != nil:
		s, err = outboxpostgres.New(h.PG, outboxpostgres.Options{Table: f.table})
	case h.SQL != nil && h.Scheme == "sqlite":
		s, err = outboxsqlite.New(h.SQL, outboxsqlite.Options{Table: f.table})
	case h.SQL != nil && h.Scheme == "mysql":
		s, err = outboxmysql.New(h.SQL, outboxmysql.Options{Table: f.table})
	default:
		h.Close()
		return nil, nil, usagef("the %s store has no outbox: the outbox lives in a SQL database (sqlite://, postgres://, mysql://)", h.Scheme)
	}
	if err != nil {
		h.Close()
		if errors.Is(err, outbox.ErrInvalidOptions) {
			return nil, nil, usageError{err}
		}
		return nil, nil, err
	}
	if _, err := s.Stats(ctx, time.Now()); err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("outbox table %q in %s: %w (is --table right? the service creates the table with its outbox store's Migrate)",
			f.table, h.Redacted, err)
	}
	return h, s, nil
}

// run opens the outbox for the command, within its timeout, and runs fn.
func (f *outboxFlags) run(c *cobra.Command, fn func(ctx context.Context, h *dsn.Handle, s outboxStore) error) error {
	ctx, cancel := f.withTimeout(c)
	defer cancel()
	h, s, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(ctx, h, s)
}

func newOutboxCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect a transactional outbox and retry its parked messages",
		Long: `The outbox commands read the outbox table a service's relay publishes from
(package outbox: outbox/sqlite, outbox/postgres, outbox/mysql).

  list   the messages, filtered by state (pending, parked, published), destination
         or ordering key, in Seq order
  stats  pending, parked and published counts, the lag (age of the oldest pending
         message) and the relay lease
  retry  make parked messages pending again; the relay publishes them, and the
         messages behind them in their ordering key, in order`,
		Example: `  idem outbox stats --store postgres://localhost/app
  idem outbox list --store postgres://localhost/app --state parked
  idem outbox retry --store postgres://localhost/app --all`,
		Args: args(cobra.NoArgs),
	}
	c.AddCommand(newOutboxListCmd(), newOutboxStatsCmd(), newOutboxRetryCmd())
	return c
}

func newOutboxListCmd() *cobra.Command {
	var (
		f     outboxFlags
		state string
		dest  string
		key   string
		after int64
		limit int
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List outbox messages, filtered and paged",
		Long: `list prints outbox messages in Seq order (per ordering key, the order the
relay publishes them in), one page at a time. When a page is full, the
command for the next page is printed.`,
		Example: `  idem outbox list --store postgres://localhost/app --state parked
  idem outbox list --store sqlite://app.db --key order-1042
  idem outbox list --store mysql://root@localhost:3306/app --table billing_outbox --json`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			filter := outbox.ListFilter{Destination: dest, OrderingKey: key, AfterSeq: after, Limit: limit}
			switch outbox.State(state) {
			case "", outbox.StatePending, outbox.StateParked, outbox.StatePublished:
				filter.State = outbox.State(state)
			default:
				return usagef("--state %q: want pending, parked or published", state)
			}
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			return f.run(c, func(ctx context.Context, h *dsn.Handle, s outboxStore) error {
				recs, err := s.List(ctx, filter)
				if err != nil {
					return fmt.Errorf("outbox list %s: %w", h.Redacted, err)
				}
				return printList(c, f, h, recs, limit)
			})
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&state, "state", "", "only this state: pending, parked or published")
	fl.StringVar(&dest, "destination", "", "only this destination (topic, subject, exchange)")
	fl.StringVar(&key, "key", "", "only this ordering key")
	fl.Int64Var(&after, "after", 0, "start after this Seq (the previous page's last)")
	fl.IntVar(&limit, "limit", 50, "messages per page")
	return c
}

// printList prints a page of records, as a table or JSON.
func printList(c *cobra.Command, f outboxFlags, h *dsn.Handle, recs []outbox.Record, limit int) error {
	now := time.Now()
	full := len(recs) == limit
	if f.json {
		type row struct {
			Seq           int64             `json:"seq"`
			ID            string            `json:"id"`
			State         outbox.State      `json:"state"`
			Destination   string            `json:"destination"`
			RoutingKey    string            `json:"routing_key,omitempty"`
			OrderingKey   string            `json:"ordering_key,omitempty"`
			Headers       map[string]string `json:"headers,omitempty"`
			PayloadBytes  int               `json:"payload_bytes"`
			Attempts      int               `json:"attempts"`
			LastError     string            `json:"last_error,omitempty"`
			CreatedAt     time.Time         `json:"created_at"`
			NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
			PublishedAt   *time.Time        `json:"published_at,omitempty"`
		}
		out := struct {
			Messages []row `json:"messages"`
			Next     int64 `json:"next_after,omitempty"`
		}{Messages: make([]row, 0, len(recs))}
		for _, r := range recs {
			x := row{r.Seq, r.ID, r.State(), r.Destination, r.RoutingKey, r.OrderingKey, r.Headers, len(r.Payload),
				r.Attempts, r.LastError, r.CreatedAt, nil, tptr(r.PublishedAt)}
			if r.Pending() {
				x.NextAttemptAt = tptr(r.NextAttemptAt)
			}
			out.Messages = append(out.Messages, x)
		}
		if full {
			out.Next = recs[len(recs)-1].Seq
		}
		return writeJSON(c.OutOrStdout(), out)
	}
	w := c.OutOrStdout()
	if len(recs) == 0 {
		fmt.Fprintf(w, "No messages match (%s, table %s).\n", h.Redacted, f.table)
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SEQ\tID\tSTATE\tDESTINATION\tKEY\tATTEMPTS\tCREATED\tNEXT/PUBLISHED\tLAST_ERROR")
	for _, r := range recs {
		when := ago(r.PublishedAt, now)
		if r.Pending() {
			when = ago(r.NextAttemptAt, now)
			if r.Parked {
				when = "-"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Seq, clip(r.ID, 48), r.State(), clip(r.Destination, 32),
			dash(clip(r.OrderingKey, 24)), r.Attempts, ago(r.CreatedAt, now), when, dash(clip(r.LastError, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if full {
		fmt.Fprintf(w, "\n%d messages shown; next page: --after %d\n", len(recs), recs[len(recs)-1].Seq)
	}
	return nil
}

func newOutboxStatsCmd() *cobra.Command {
	var f outboxFlags
	c := &cobra.Command{
		Use:   "stats",
		Short: "Count an outbox's messages, with the lag and the relay lease",
		Long: `stats counts the outbox's pending messages (not yet confirmed by the broker),
its parked ones (rejected by the broker or out of attempts: retry them with
'idem outbox retry') and the published ones kept until the retention ends,
with the lag (the age of the oldest pending message: how far the relay is
behind) and which relay holds the lease.`,
		Example: `  idem outbox stats --store postgres://localhost/app
  IDEM_STORE=sqlite://app.db idem outbox stats --json`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return f.run(c, func(ctx context.Context, h *dsn.Handle, s outboxStore) error {
				now := time.Now()
				st, err := s.Stats(ctx, now)
				if err != nil {
					return fmt.Errorf("outbox stats %s: %w", h.Redacted, err)
				}
				return printStats(c, f, h, st, now)
			})
		},
	}
	f.add(c)
	return c
}

// printStats prints an outbox's counts, as a table or JSON.
func printStats(c *cobra.Command, f outboxFlags, h *dsn.Handle, st outbox.Stats, now time.Time) error {
	held := st.Lease.Token != 0 && now.Before(st.Lease.Until)
	if f.json {
		type lease struct {
			Owner string    `json:"owner"`
			Token int64     `json:"token"`
			Until time.Time `json:"until"`
		}
		out := struct {
			Pending       int64      `json:"pending"`
			Parked        int64      `json:"parked"`
			Published     int64      `json:"published"`
			OldestPending *time.Time `json:"oldest_pending,omitempty"`
			LagSeconds    float64    `json:"lag_seconds"`
			Lease         *lease     `json:"lease,omitempty"`
		}{Pending: st.Pending, Parked: st.Parked, Published: st.Published, OldestPending: tptr(st.OldestPending),
			LagSeconds: st.Lag(now).Seconds()}
		if held {
			out.Lease = &lease{st.Lease.Owner, st.Lease.Token, st.Lease.Until}
		}
		return writeJSON(c.OutOrStdout(), out)
	}
	w := c.OutOrStdout()
	tw := newTable(w)
	fmt.Fprintf(tw, "table\t%s (%s)\n", f.table, h.Redacted)
	fmt.Fprintf(tw, "pending\t%d\n", st.Pending)
	fmt.Fprintf(tw, "parked\t%d\n", st.Parked)
	fmt.Fprintf(tw, "published\t%d (kept until the relay's retention ends)\n", st.Published)
	lag := "-"
	if !st.OldestPending.IsZero() {
		lag = short(st.Lag(now)) + " (oldest pending created " + ago(st.OldestPending, now) + ")"
	}
	fmt.Fprintf(tw, "lag\t%s\n", lag)
	relay := "none active (no relay holds the lease)"
	if held {
		relay = fmt.Sprintf("%s, token %d, lease ends %s", st.Lease.Owner, st.Lease.Token, ago(st.Lease.Until, now))
	}
	fmt.Fprintf(tw, "relay\t%s\n", relay)
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Parked > 0 {
		fmt.Fprintf(w, "\n%d parked: see them with 'idem outbox list --state parked', retry with 'idem outbox retry --all'.\n", st.Parked)
	}
	return nil
}

func newOutboxRetryCmd() *cobra.Command {
	var (
		f   outboxFlags
		all bool
	)
	c := &cobra.Command{
		Use:   "retry [SEQ...]",
		Short: "Make parked outbox messages pending again",
		Long: `retry makes parked messages pending again, with their attempts reset: the
relay publishes them at its next poll, then the messages their ordering keys
held back, in order. Name the messages by Seq (from 'idem outbox list --state
parked'), or pass --all. A message the broker rejected is parked again unless
what made it rejected (a size limit, a missing destination) was fixed.`,
		Example: `  idem outbox retry --store postgres://localhost/app 1042 1043
  idem outbox retry --store sqlite://app.db --all`,
		RunE: func(c *cobra.Command, a []string) error {
			if all == (len(a) > 0) {
				return usagef("name the parked messages by Seq, or pass --all (not both)")
			}
			var seqs []int64
			for _, s := range a {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n <= 0 {
					return usagef("%q is not a Seq (a positive number from 'idem outbox list')", s)
				}
				seqs = append(seqs, n)
			}
			var n int
			err := f.run(c, func(ctx context.Context, h *dsn.Handle, s outboxStore) (err error) {
				if n, err = s.Retry(ctx, outbox.RetryRequest{Seqs: seqs, Now: time.Now()}); err != nil {
					return fmt.Errorf("outbox retry %s: %w", h.Redacted, err)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(c.OutOrStdout(), struct {
					Retried int `json:"retried"`
				}{n})
			}
			w := c.OutOrStdout()
			switch {
			case n == 0 && all:
				fmt.Fprintln(w, "No parked messages.")
			case n < len(seqs):
				fmt.Fprintf(w, "%d of %d made pending again; the others are not parked (published, pending, or gone).\n", n, len(seqs))
			default:
				fmt.Fprintf(w, "%d made pending again; the relay publishes them at its next poll.\n", n)
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&all, "all", false, "retry every parked message")
	return c
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
