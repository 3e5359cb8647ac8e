package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dlq"
)

// brokerFlags are the flags of the commands that read a broker.
type brokerFlags struct {
	url string
}

func (b *brokerFlags) add(c *cobra.Command, required bool) {
	help := "broker URL naming the dead letters (default $IDEM_BROKER); forms below"
	if !required {
		help = "broker URL (default $IDEM_BROKER): also check its redelivery horizon; forms below"
	}
	c.Flags().StringVar(&b.url, "broker", "", help)
	c.Long += "\n\n" + brokerForms()
}

// open opens the broker's dead letters; nil, nil when none is named and
// none is required.
func (b *brokerFlags) open(ctx context.Context, required bool) (dlq.Queue, error) {
	raw := b.url
	if raw == "" {
		raw = os.Getenv("IDEM_BROKER")
	}
	if raw == "" {
		if !required {
			return nil, nil
		}
		return nil, usagef("no broker given: pass --broker URL or set IDEM_BROKER (%s)", brokerSchemes())
	}
	q, err := openQueue(ctx, raw)
	if errors.Is(err, dlq.ErrBadURL) {
		return nil, usageError{err}
	}
	return q, err
}

func newDLQCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dlq",
		Short: "List, show and replay the dead letters of a broker",
		Long: `dlq reads the dead letters idem's consumers wrote to a broker (NATS
dead-letter stream, RabbitMQ dead-letter queue, Kafka dead-letter topic,
Service Bus $DeadLetterQueue, Redis dead-letter stream, MQTT dead-letter
topic, SQS dead-letter queue, Pub/Sub dead-letter topic, Event Hubs
dead-letter hub), shows one beside the stored record of its
key, and replays them through the adapter's Replay: the consumer's record
then decides, as for any redelivery (a conflict is dead-lettered again, a
message never completed is processed, one completed meanwhile is a
duplicate).`,
		Example: `  idem dlq list --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ'
  idem dlq show 42 --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ' --store postgres://app@db/app
  idem dlq replay --reason max_deliver --broker 'amqp://guest:guest@localhost:5672/?dlq=orders.dlq'
  idem dlq replay 0/17 0/18 --yes --as alice --broker 'kafka://localhost:9092?dlq=orders.dlq'
  idem dlq list --broker 'redis://localhost:6379?dlq=orders.dlq'
  idem dlq list --broker 'sqs://?dlq=orders-dlq&region=eu-west-1'
  idem dlq replay --all --broker 'pubsub://my-project?dlq=orders-dlq-reader'
  idem dlq list --broker 'mqtt://localhost:1883?dlq=dlq/sensors&client=ops-dlq'
  idem dlq list --broker 'eventhubs:Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=ops;SharedAccessKey=...;EntityPath=orders-dlq'`,
	}
	c.Long += "\n\n" + brokerForms()
	c.AddCommand(newDLQListCmd(), newDLQShowCmd(), newDLQReplayCmd())
	return c
}

// dlqCmd is what the dlq subcommands share: the broker and the store
// flags, and the open broker.
type dlqCmd struct {
	b brokerFlags
	f storeFlags
}

func (d *dlqCmd) add(c *cobra.Command) {
	d.b.add(c, true)
	d.f.add(c)
	c.Flag("store").Usage = "store DSN (default $IDEM_STORE): show the stored record of the dead letter's key beside it"
	if c.Name() != "show" { // only show reads the store
		_ = c.Flags().MarkHidden("store")
	}
}

// run opens the broker, bounded by --timeout, and runs f with it.
func (d *dlqCmd) run(c *cobra.Command, f func(ctx context.Context, q dlq.Queue) error) error {
	ctx, cancel := d.f.withTimeout(c)
	defer cancel()
	q, err := d.b.open(ctx, true)
	if err != nil {
		return err
	}
	defer q.Close()
	return f(ctx, q)
}

func newDLQListCmd() *cobra.Command {
	var (
		d      dlqCmd
		limit  int
		reason string
	)
	c := &cobra.Command{
		Use:   "list",
		Short: "List dead letters with their reason and age",
		Long: `list prints the dead letters oldest first: the id to show or replay them by,
their age, reason, key, where the original came from, and the error. It
leaves every dead letter where it is.`,
		Example: `  idem dlq list --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ'
  idem dlq list --reason conflict --json --broker 'kafka://localhost:9092?dlq=orders.dlq'`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return d.run(c, func(ctx context.Context, q dlq.Queue) error {
				dls, err := q.List(ctx, 0)
				if err != nil {
					return err
				}
				dls = byReason(dls, reason)
				if limit > 0 && len(dls) > limit {
					dls = dls[:limit]
				}
				if d.f.json {
					return writeJSON(c.OutOrStdout(), map[string]any{"broker": q.Name(), "dead_letters": nonNil(dls)})
				}
				return printDeadLetters(c.OutOrStdout(), q.Name(), dls, time.Now())
			})
		},
	}
	d.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "print at most this many (0: all)")
	c.Flags().StringVar(&reason, "reason", "", "only dead letters of this reason (conflict, permanent, max_deliver, parked, ...)")
	return c
}

func nonNil(dls []dlq.DeadLetter) []dlq.DeadLetter {
	if dls == nil {
		return []dlq.DeadLetter{}
	}
	return dls
}

func byReason(dls []dlq.DeadLetter, reason string) []dlq.DeadLetter {
	if reason == "" {
		return dls
	}
	var out []dlq.DeadLetter
	for _, dl := range dls {
		if dl.Reason == reason {
			out = append(out, dl)
		}
	}
	return out
}

func printDeadLetters(w io.Writer, name string, dls []dlq.DeadLetter, now time.Time) error {
	if len(dls) == 0 {
		_, err := fmt.Fprintf(w, "No dead letters in %s.\n", name)
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tAGE\tREASON\tKEY\tSOURCE\tERROR")
	for _, dl := range dls {
		age := "-"
		if !dl.At.IsZero() {
			age = short(now.Sub(dl.At))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", dl.ID, age, dash(dl.Reason), dash(dl.Key), dash(dl.Source), dash(clip(dl.Error, 60)))
	}
	fmt.Fprintf(tw, "\n%d dead letters in %s.\n", len(dls), name)
	return tw.Flush()
}

// findDeadLetter is the dead letter with id, or dlq.ErrNotFound.
func findDeadLetter(ctx context.Context, q dlq.Queue, id string) (dlq.DeadLetter, error) {
	dls, err := q.List(ctx, 0)
	if err != nil {
		return dlq.DeadLetter{}, err
	}
	for _, dl := range dls {
		if dl.ID == id {
			return dl, nil
		}
	}
	return dlq.DeadLetter{}, fmt.Errorf("%w: %q in %s ('idem dlq list' shows what is there)", dlq.ErrNotFound, id, q.Name())
}

func newDLQShowCmd() *cobra.Command {
	var d dlqCmd
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter, beside the stored record of its key",
		Long: `show prints one dead letter's headers and body. With --store it reads the
record stored for its key (the Idem-Key header) and prints its state,
fingerprint, token and attempts beside the dead letter's: which content
holds the key. The same fingerprint on both sides means this message's
content is the one recorded.`,
		Example: `  idem dlq show 42 --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ' --store postgres://app@db/app
  idem dlq show 0/17 --broker 'kafka://localhost:9092?dlq=orders.dlq' --store sqlite://idem.db --json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			return d.run(c, func(ctx context.Context, q dlq.Queue) error {
				dl, err := findDeadLetter(ctx, q, a[0])
				if err != nil {
					return err
				}
				var st stored
				if d.f.dsn != "" || os.Getenv("IDEM_STORE") != "" {
					if st, err = storedRecord(ctx, &d.f, dl); err != nil {
						return err
					}
				}
				if d.f.json {
					out := map[string]any{"broker": q.Name(), "dead_letter": dl}
					if st.rec != nil {
						out["record"] = toJSON(*st.rec, time.Now())
					}
					if st.kept != nil {
						out["record_payload"], out["record_payload_truncated"] = string(st.kept), st.cut
					}
					return writeJSON(c.OutOrStdout(), out)
				}
				return printDeadLetter(c.OutOrStdout(), dl, st, d.f.dsn != "" || os.Getenv("IDEM_STORE") != "", time.Now())
			})
		},
	}
	d.add(c)
	return c
}

// stored is what the store holds for a dead letter's key: its record (nil:
// none, never claimed or swept) and the kept copy of the content that
// holds it (nil: none kept; cut: truncated at the guard's KeepPayload).
type stored struct {
	rec  *idem.Record
	kept []byte
	cut  bool
}

// storedRecord reads the record of the dead letter's key, and the copy of
// the content holding it where the guard kept one (Options.KeepPayload).
func storedRecord(ctx context.Context, f *storeFlags, dl dlq.DeadLetter) (stored, error) {
	h, err := f.open(ctx, true)
	if err != nil {
		return stored{}, err
	}
	defer h.Close()
	for _, k := range dl.Splits() {
		r, err := h.Store.Get(ctx, k)
		if errors.Is(err, idem.ErrNotFound) {
			continue
		}
		if err != nil {
			return stored{}, fmt.Errorf("get %s: %w", k, err)
		}
		st := stored{rec: &r}
		if p, cut, err := idem.KeptPayload(ctx, h.Store, k, r.Fingerprint); err == nil {
			st.kept, st.cut = p, cut
		}
		return st, nil
	}
	return stored{}, nil
}

func printDeadLetter(w io.Writer, dl dlq.DeadLetter, st stored, withStore bool, now time.Time) error {
	rec := st.rec
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", dl.ID)
	row("reason", dash(dl.Reason))
	row("error", dash(dl.Error))
	row("key", dash(dl.Key))
	row("source", dash(dl.Source))
	if !dl.At.IsZero() {
		row("at", stamp(dl.At, now))
	}
	if withStore {
		fmt.Fprintln(tw, "\n\tDEAD LETTER\tSTORED RECORD")
		side := func(k, mine, stored string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", k, dash(mine), dash(stored)) }
		if rec == nil {
			side("state", dl.Headers[idem.HeaderStoredState], "(no record: never claimed, or swept)")
			side("fingerprint", dl.Fingerprint, "")
		} else {
			side("state", dl.Headers[idem.HeaderStoredState], stateLabel(*rec, now))
			side("fingerprint", dl.Fingerprint, rec.Fingerprint)
			side("token", dl.Headers[idem.HeaderStoredToken], fmt.Sprint(rec.Token))
			side("attempts", dl.Headers[idem.HeaderStoredAttempts], fmt.Sprint(rec.Attempts))
			side("created at", dl.Headers[idem.HeaderStoredCreatedAt], stamp(rec.CreatedAt, now))
			side("expires at", "", stamp(rec.ExpiresAt, now))
			verdict := "the stored record holds other content: a replay is dead-lettered again as a conflict"
			switch {
			case dl.Fingerprint == "" || rec.Fingerprint == "":
				verdict = "no fingerprint to compare"
			case dl.Fingerprint == rec.Fingerprint && rec.State == idem.StateCompleted:
				verdict = "this content holds the key, completed: a replay is a duplicate"
			case dl.Fingerprint == rec.Fingerprint:
				verdict = "this content holds the key, not completed: a replay processes it"
			}
			if st.kept != nil {
				kept := clip(string(st.kept), 200)
				if st.cut {
					kept += " (first bytes only)"
				}
				side("payload", clip(string(dl.Body), 200), kept)
			}
			fmt.Fprintf(tw, "content\t%s\n", verdict)
			if dl.Fingerprint != "" && rec.Fingerprint != "" && dl.Fingerprint != rec.Fingerprint && rec.State != idem.StateInProgress {
				k := rec.Key()
				fmt.Fprintf(tw, "to accept it\tidem resolve %q %q --supersede --fingerprint %s, then replay this dead letter\n",
					k.Scope, k.ID, dl.Fingerprint)
			}
		}
	}
	fmt.Fprintln(tw, "\nHEADER\tVALUE")
	names := make([]string, 0, len(dl.Headers))
	for k := range dl.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(tw, "%s\t%s\n", k, clip(dl.Headers[k], 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nbody (%d bytes): %s\n", len(dl.Body), clip(fmt.Sprintf("%q", dl.Body), 400))
	return err
}

func newDLQReplayCmd() *cobra.Command {
	var (
		d      dlqCmd
		reason string
		all    bool
		yes    bool
		as     string
	)
	c := &cobra.Command{
		Use:   "replay [ID...]",
		Short: "Replay dead letters through the adapter's Replay, with confirmation",
		Long: `replay sends dead letters back to where they came from with the adapter's
Replay and removes each replayed one from the dead-letter entity (NATS
deletes it, RabbitMQ acks it, Service Bus completes it, Redis deletes the
entry, SQS deletes the message, Pub/Sub acks it; Kafka and Event Hubs
keep it: a topic cannot drop one record, nor a hub one event; MQTT acks it in the dead-letter session, in
order: a dead letter behind one not replayed is refused). Name them by id (as list prints them,
space- or comma-separated), or take every one of a --reason, or --all.
It lists the selection and asks before replaying (--yes does not ask).

Each replay is logged to stderr as a structured line with who did it (the
OS user, or --as NAME), the dead letter and the result.`,
		Example: `  idem dlq replay 42,43 --broker 'nats://127.0.0.1:4222?dlq=ORDERS_DLQ'
  idem dlq replay --reason max_deliver --yes --as alice --broker 'amqp://guest:guest@localhost:5672/?dlq=orders.dlq'`,
		RunE: func(c *cobra.Command, a []string) error {
			var ids []string
			for _, x := range a {
				for _, id := range strings.Split(x, ",") {
					if id = strings.TrimSpace(id); id != "" {
						ids = append(ids, id)
					}
				}
			}
			if n := btoi(len(ids) > 0) + btoi(reason != "") + btoi(all); n != 1 {
				return usagef("name what to replay: IDs, --reason R or --all (exactly one of them)")
			}
			return d.run(c, func(ctx context.Context, q dlq.Queue) error {
				return replay(ctx, c, q, selection{ids: ids, reason: reason, all: all}, yes, who(as), d.f.json)
			})
		},
	}
	d.add(c)
	c.Flags().StringVar(&reason, "reason", "", "replay every dead letter of this reason (conflict, permanent, max_deliver, ...)")
	c.Flags().BoolVar(&all, "all", false, "replay every dead letter")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	c.Flags().StringVar(&as, "as", "", "name logged as who replayed (default: the OS user)")
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// who names the operator: --as, else the OS user.
func who(as string) string {
	if as != "" {
		return as
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// selection is what replay was asked for.
type selection struct {
	ids    []string
	reason string
	all    bool
}

func (s selection) pick(dls []dlq.DeadLetter) (picked []dlq.DeadLetter, missing []string) {
	want := map[string]bool{}
	for _, id := range s.ids {
		want[id] = true
	}
	for _, dl := range dls {
		if s.all || (s.reason != "" && dl.Reason == s.reason) || want[dl.ID] {
			picked = append(picked, dl)
			delete(want, dl.ID)
		}
	}
	for _, id := range s.ids {
		if want[id] {
			missing = append(missing, id)
		}
	}
	return picked, missing
}

// replayed is one line of replay's JSON report.
type replayedJSON struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Key    string `json:"key,omitempty"`
	Error  string `json:"error,omitempty"`
}

func replay(ctx context.Context, c *cobra.Command, q dlq.Queue, sel selection, yes bool, by string, asJSON bool) error {
	dls, err := q.List(ctx, 0)
	if err != nil {
		return err
	}
	picked, missing := sel.pick(dls)
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s in %s ('idem dlq list' shows what is there)", dlq.ErrNotFound, strings.Join(missing, ", "), q.Name())
	}
	if len(picked) == 0 {
		return printOut(c, asJSON, map[string]any{"broker": q.Name(), "replayed": []replayedJSON{}},
			fmt.Sprintf("Nothing to replay in %s.\n", q.Name()))
	}
	if !yes {
		w := c.ErrOrStderr()
		if err := printDeadLetters(w, q.Name(), picked, time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(w, "Replay these %d dead letters as %s? [y/N] ", len(picked), by)
		line, _ := bufio.NewReader(c.InOrStdin()).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(w, "Not replayed.")
			return silentError{code: exitFailure}
		}
	}
	log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil))
	if asJSON {
		log = slog.New(slog.NewJSONHandler(c.ErrOrStderr(), nil))
	}
	ids := make([]string, len(picked))
	for i, dl := range picked {
		ids[i] = dl.ID
	}
	var (
		out    []replayedJSON
		failed int
	)
	err = q.Replay(ctx, ids, func(dl dlq.DeadLetter, err error) {
		r := replayedJSON{ID: dl.ID, Reason: dl.Reason, Key: dl.Key}
		attrs := []any{"who", by, "broker", q.Name(), "id", dl.ID, "reason", dl.Reason, "key", dl.Key}
		if err != nil {
			failed++
			r.Error = err.Error()
			log.Error("idem dlq replay failed", append(attrs, "err", err)...)
		} else {
			log.Info("idem dlq replayed", attrs...)
		}
		out = append(out, r)
	})
	if err != nil {
		return fmt.Errorf("replay from %s: %w (%d replayed before)", q.Name(), err, len(out)-failed)
	}
	if lost := len(picked) - len(out); lost > 0 {
		fmt.Fprintf(c.ErrOrStderr(), "%d of the selected dead letters were gone when replayed (taken by another replay?).\n", lost)
	}
	text := fmt.Sprintf("Replayed %d of %d dead letters from %s.\n", len(out)-failed, len(picked), q.Name())
	if err := printOut(c, asJSON, map[string]any{"broker": q.Name(), "who": by, "replayed": out}, text); err != nil {
		return err
	}
	if failed > 0 {
		return silentError{code: exitFailure}
	}
	return nil
}
