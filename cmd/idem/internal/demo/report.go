package demo

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the report as a short aligned table, and the offending
// orders when the invariant does not hold.
func (r *Report) WriteTable(w io.Writer) error {
	broker := r.Broker
	if r.Producer != "" && r.Producer != ProducerDirect {
		broker += ", producer: " + r.Producer
	}
	fmt.Fprintf(w, "idem demo: %d consumers, %s, %s store (%s mode), seed %d, %.1fs\n\n",
		r.Consumers, broker, r.Store, r.Mode, r.Seed, float64(r.ElapsedMS)/1000)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, v any, note string) {
		if note == "" { // no padding after the value: no trailing blanks
			fmt.Fprintf(tw, "  %s\t%s\n", label, alignRight(fmt.Sprint(v), 7))
			return
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", label, alignRight(fmt.Sprint(v), 7), note)
	}
	published := fmt.Sprintf("(%d producer retries, %d reusing an id with other content)", r.Retries, r.ConflictingSent)
	if r.BrokerDropped > 0 {
		published = fmt.Sprintf("(%d producer retries, %d of them dropped by the broker's duplicate detection; %d reusing an id with other content)",
			r.Retries, r.BrokerDropped, r.ConflictingSent)
	}
	if r.OutboxKeptOnce > 0 {
		published = fmt.Sprintf("(%d producer retries, %d of them kept once by the outbox; %d reusing an id with other content)",
			r.Retries, r.OutboxKeptOnce, r.ConflictingSent)
	}
	row("published", r.Published, published)
	row("unique orders", r.Unique, "")
	row("deliveries", r.Deliveries, fmt.Sprintf("(chaos: %d crashes before ack, %d acks lost, %d handler failures)", r.Crashes, r.AcksLost, r.HandlerFailures))
	row("duplicates suppressed", r.DuplicatesSuppressed, "")
	ids := "ids"
	if r.ConflictingSent == 1 {
		ids = "id"
	}
	// The message count is printed even when it equals the conflicts: how
	// many retries of a losing version arrive depends on timing, and a line
	// whose shape depends on it would read differently run to run.
	conflicts := fmt.Sprintf("(of %d %s reused with other content; %d messages: each losing version with its retries)",
		r.ConflictingSent, ids, r.ConflictDeadLetters)
	row("conflicts dead-lettered", r.Conflicts, conflicts)
	row("charges applied by idem", r.EffectsApplied, "")
	row("charges applied by naive consumer", r.NaiveEffectsApplied,
		fmt.Sprintf("(%d orders charged more than once, ledger off by %s)", r.NaiveOvercharged, cents(r.NaiveBalanceError)))
	if r.InvariantOK {
		row("exactly-once invariant", "yes", "(every order charged once, balances right, reused ids dead-lettered)")
	} else {
		row("exactly-once invariant", "NO", "")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.writeCleanup(w)
	if !r.InvariantOK {
		fmt.Fprintln(w, "\nOffending orders:")
		for _, o := range r.Offending {
			fmt.Fprintln(w, "  "+o)
		}
		if len(r.Offending) == 0 {
			fmt.Fprintf(w, "  idem applied %d charges for %d orders\n", r.EffectsApplied, r.Unique)
		}
	}
	return nil
}

// writeCleanup says what the run removed from a store the user named, and
// what it left there.
func (r *Report) writeCleanup(w io.Writer) {
	if !r.StoreNamed {
		return
	}
	what := "records"
	if r.Mode == "tx" {
		what = "records and ledger tables"
	}
	at := r.Store
	if r.Where != "" {
		at += ", " + r.Where
	}
	if len(r.LeftBehind) == 0 {
		fmt.Fprintf(w, "\nCleanup: removed the run's %s (%d records of scope %s) from %s.\n", what, r.RecordsRemoved, r.Scope, at)
	} else {
		fmt.Fprintf(w, "\nCleanup: removed %d records of scope %s from %s, but could not:\n", r.RecordsRemoved, r.Scope, at)
		for _, l := range r.LeftBehind {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if r.SchemaCreated {
		fmt.Fprintf(w, "The run created idem's schema there (%s), as idem migrate does, and left it for your consumers.\n", r.Where)
	}
}

func cents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

// alignRight right-aligns numbers in a column of width n.
func alignRight(s string, n int) string {
	for len(s) < n {
		s = " " + s
	}
	return s
}
