package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dlq"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// Finding levels: a trap fails the doctor (exit 1); a warning and a note
// are printed only.
const (
	levelTrap    = "trap"
	levelWarning = "warning"
	levelNote    = "note"
	levelOK      = "ok"
)

// finding is one thing idem doctor found.
type finding struct {
	Check   string `json:"check"` // schema, retention, stale, sweep
	Level   string `json:"level"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// doctorOptions are idem doctor's thresholds.
type doctorOptions struct {
	retention   time.Duration // 0: the guard's default
	horizon     time.Duration // the operator's stated redelivery horizon; 0: none
	staleAfter  time.Duration
	sweepLag    time.Duration
	lease       time.Duration
	recordLimit int
	now         func() time.Time // this host's clock; default time.Now
}

func newDoctorCmd() *cobra.Command {
	var (
		f  storeFlags
		b  brokerFlags
		do doctorOptions
	)
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Find the traps: schema drift, retention shorter than the broker's redelivery, stale and unswept records",
		Long: `doctor checks what costs a new user their time, and says how to fix each:

  schema     the store's tables and indexes are what its migrations made
             (a records table dropped while its migrations table stayed:
             every message fails); fix: idem migrate.
  retention  the records outlive every way a message can come back: the
             broker's redelivery budget (NATS MaxDeliver × AckWait or
             BackOff), the time it keeps messages (stream MaxAge, Kafka
             retention.ms) and dead letters (the dead-letter stream's
             MaxAge, the dead-letter topic's retention.ms), and
             --redelivery-horizon, the longest you let a dead letter wait
             before a replay. Retention is --retention, or the guard's
             default (7 days). A replay after its record expired is applied
             again. Service Bus's LockDuration × MaxDeliveryCount and
             DefaultMessageTimeToLive come from its administration API;
             SQS maxReceiveCount × VisibilityTimeout and
             MessageRetentionPeriod, Pub/Sub MaxDeliveryAttempts × ack
             deadline and message retention; Redis Streams and MQTT set no
             age limit (a warning). Settings a client cannot read (RabbitMQ
             queue arguments over AMQP; Service Bus without that API; an
             MQTT broker's queue limits; an event hub's retention, which
             the Event Hubs protocol does not give) are named: pass them
             as --redelivery-horizon.
  clock      this host's clock against the store server's (PostgreSQL,
             MySQL, Redis), the fleet's shared reference: off by more than
             --lease/6, two hosts can see a live lease as ended.
  stale      in-progress records whose lease ended more than --stale-after
             ago: a crashed owner, parked for an operator (idem resolve).
  sweep      records expired more than --sweep-lag ago and still stored:
             no sweeper holds the leader lock (run one, or idem sweep).

It exits 1 when it found a trap, 0 otherwise (warnings and notes are
printed only); --json prints the findings for scripts.`,
		Example: `  idem doctor --store postgres://app@db/app
  idem doctor --store sqlite://idem.db --broker 'nats://127.0.0.1:4222?stream=ORDERS&consumer=billing&dlq=ORDERS_DLQ'
  idem doctor --store mysql://root@localhost/test --broker 'kafka://localhost:9092?topic=orders&dlq=orders.dlq' --retention 720h --json`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := f.withTimeout(c)
			defer cancel()
			rep, err := examine(ctx, &f, &b, do)
			if err != nil {
				return err
			}
			return printReport(c, f.json, rep)
		},
	}
	f.add(c)
	b.add(c, false)
	fl := c.Flags()
	fl.DurationVar(&do.retention, "retention", 0, "the guard's Retention (default: idem's default, 7 days)")
	fl.DurationVar(&do.horizon, "redelivery-horizon", 0, "the longest a message may come back after it was first processed (a dead letter's wait before its replay), when the broker does not tell")
	fl.DurationVar(&do.staleAfter, "stale-after", 10*idem.DefaultLease, "report in-progress records whose lease ended longer ago than this")
	fl.DurationVar(&do.sweepLag, "sweep-lag", time.Hour, "report records expired longer ago than this and not swept")
	fl.DurationVar(&do.lease, "lease", idem.DefaultLease, "the guard's Lease: this host's clock may be off the store server's by Lease/6")
	return c
}

// doctorReport is what idem doctor examined and found.
type doctorReport struct {
	Store    string    `json:"store"`           // the DSN, password redacted
	Table    string    `json:"table,omitempty"` // the records table examined (SQL stores; the collection on MongoDB)
	Where    string    `json:"where,omitempty"` // where the records live: "table idem_records", "prefix idem"
	Findings []finding `json:"findings"`
	Traps    int       `json:"traps"`
}

// doctor runs every check and returns the findings.
func doctor(ctx context.Context, f *storeFlags, b *brokerFlags, do doctorOptions) ([]finding, error) {
	rep, err := examine(ctx, f, b, do)
	return rep.Findings, err
}

// examine runs every check on the store and the broker, and says what it
// examined.
func examine(ctx context.Context, f *storeFlags, b *brokerFlags, do doctorOptions) (doctorReport, error) {
	fs, h, err := doctorChecks(ctx, f, b, do)
	if err != nil {
		return doctorReport{}, err
	}
	rep := doctorReport{Store: h.Redacted, Table: h.Table(), Where: h.Where, Findings: fs}
	for _, x := range fs {
		if x.Level == levelTrap {
			rep.Traps++
		}
	}
	return rep, nil
}

// doctorChecks runs every check; the handle it returns is closed.
func doctorChecks(ctx context.Context, f *storeFlags, b *brokerFlags, do doctorOptions) ([]finding, *dsn.Handle, error) {
	if do.recordLimit <= 0 {
		do.recordLimit = 1000
	}
	if do.now == nil {
		do.now = time.Now
	}
	if do.lease <= 0 {
		do.lease = idem.DefaultLease
	}
	h, err := f.open(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	schema, whole, err := checkSchemaFindings(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	clock, err := clockFinding(ctx, h, do.now, do.lease)
	if err != nil {
		return nil, nil, err
	}
	fs := append(schema, clock)
	if whole {
		rec, err := recordFindings(ctx, h.Store, do, do.now())
		if err != nil {
			return nil, nil, err
		}
		fs = append(fs, rec...)
	} else {
		fs = append(fs, finding{Check: "records", Level: levelNote, Message: "stale and unswept records not checked: the schema is not whole"})
	}
	q, err := b.open(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	if q != nil {
		defer q.Close()
	}
	ret, err := retentionFindings(ctx, q, do)
	if err != nil {
		return nil, nil, err
	}
	return append(fs, ret...), h, nil
}

// checkSchemaFindings is a trap per missing object; whole says the
// records can be read. Where the records table itself is missing and the
// database keeps idem's records in other tables, the DSN most likely lacks
// its ?table=: the trap names those tables and the DSN that reads them,
// never a migrate, which would create a second, empty table beside them.
func checkSchemaFindings(ctx context.Context, h *dsn.Handle) (fs []finding, whole bool, err error) {
	sc, ok := h.Native.(schemaChecker)
	if !ok {
		return []finding{{Check: "schema", Level: levelOK, Message: fmt.Sprintf("the %s store has no schema to drift (%s)", h.Scheme, where(h))}}, true, nil
	}
	err = sc.CheckSchema(ctx)
	var se *idem.SchemaError
	if err != nil && !errors.As(err, &se) {
		return nil, false, fmt.Errorf("check schema of %s: %w", h.Where, err)
	}
	if se == nil {
		return []finding{{Check: "schema", Level: levelOK, Message: h.Where + " and its indexes are whole"}}, true, nil
	}
	creates := "recreates what is missing of " + h.Where
	if slices.ContainsFunc(se.Missing, func(m string) bool { return strings.HasPrefix(m, "table ") }) {
		creates = fmt.Sprintf("creates table %s and its indexes", h.Table())
		others, err := h.OtherTables(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("list the tables holding idem's records: %w", err)
		}
		if len(others) > 0 {
			return []finding{otherTablesFinding(h, others)}, false, nil
		}
	}
	for _, m := range se.Missing {
		fs = append(fs, finding{Check: "schema", Level: levelTrap,
			Message: "missing: " + m + " (never migrated, or dropped since: every call fails until it exists again; migrate believes the schema over its bookkeeping; no other table of the database holds idem's records)",
			Fix:     fmt.Sprintf("idem migrate --store '%s'%s (%s)", h.Redacted, h.PasswordNote(), creates)})
	}
	return fs, false, nil
}

// otherTablesFinding is the trap of a DSN whose records table does not
// exist while others hold idem's records.
func otherTablesFinding(h *dsn.Handle, others []string) finding {
	how := "this DSN names no table, so it reads the default"
	if h.TableGiven() {
		how = "this DSN names it with ?table="
	}
	var dsns []string
	for _, t := range others {
		dsns = append(dsns, fmt.Sprintf("--store '%s'", dsn.SetParam(h.Redacted, "table", t)))
	}
	return finding{Check: "schema", Level: levelTrap,
		Message: fmt.Sprintf("table %s does not exist (%s), but the database keeps idem's records in %s: point the doctor at that table (creating %s would only add a second, empty table beside the real one)",
			h.Table(), how, strings.Join(others, ", "), h.Table()),
		Fix: "name the table in the DSN: idem doctor " + strings.Join(dsns, ", or ") + h.PasswordNote()}
}

// recordFindings: stale in-progress records and expired records left
// unswept.
func recordFindings(ctx context.Context, s idem.Store, do doctorOptions, now time.Time) ([]finding, error) {
	in, ok := s.(idem.Inspector)
	if !ok {
		return []finding{{Check: "records", Level: levelNote, Message: "this store cannot list records: stale and unswept records not checked"}}, nil
	}
	var fs []finding
	stale, err := in.List(ctx, idem.ListFilter{State: idem.StateInProgress, StaleAt: now.Add(-do.staleAfter), Limit: do.recordLimit})
	if err != nil {
		return nil, fmt.Errorf("list stale records: %w", err)
	}
	if len(stale) > 0 {
		oldest := stale[0]
		for _, r := range stale {
			if r.LeaseUntil.Before(oldest.LeaseUntil) {
				oldest = r
			}
		}
		n := fmt.Sprint(len(stale))
		if len(stale) == do.recordLimit {
			n = "at least " + n
		}
		fs = append(fs, finding{Check: "stale", Level: levelTrap,
			Message: fmt.Sprintf("%s in-progress records whose lease ended over %v ago (oldest: %s, lease ended %s): their owner crashed, and the Stale policy has not retaken them",
				n, do.staleAfter, oldest.Key(), ago(oldest.LeaseUntil, now)),
			Fix: fmt.Sprintf("idem list --state in_progress --stale, then idem resolve %s %s --complete or --release", oldest.Scope, oldest.Key().ID)})
	} else {
		fs = append(fs, finding{Check: "stale", Level: levelOK, Message: fmt.Sprintf("no in-progress record stale for over %v", do.staleAfter)})
	}
	stats, err := in.Stats(ctx, now.Add(-do.sweepLag))
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	var unswept int64
	for _, st := range stats {
		unswept += st.Expired
	}
	if unswept > 0 {
		fs = append(fs, finding{Check: "sweep", Level: levelTrap,
			Message: fmt.Sprintf("%d records expired over %v ago are still stored: no sweeper has held the leader lock since (the table grows)", unswept, do.sweepLag),
			Fix:     "run an idem.Sweeper in one process (it takes the leader lock), or idem sweep --store DSN from cron"})
	} else {
		fs = append(fs, finding{Check: "sweep", Level: levelOK, Message: fmt.Sprintf("no record left unswept for over %v", do.sweepLag)})
	}
	return fs, nil
}

// retentionFindings compares the retention with what the broker read
// and --redelivery-horizon.
func retentionFindings(ctx context.Context, q dlq.Queue, do doctorOptions) ([]finding, error) {
	retention, source := do.retention, "--retention"
	if retention <= 0 {
		retention, source = idem.DefaultRetention, "the guard's default"
	}
	ret := fmt.Sprintf("retention %s (%s)", days(retention), source)
	var spans []dlq.Span
	var fs []finding
	if do.horizon > 0 {
		spans = append(spans, dlq.Span{What: "--redelivery-horizon", Duration: do.horizon, DeadLetters: true})
	}
	if q != nil {
		hz, ok := q.(dlq.Horizoner)
		if !ok {
			fs = append(fs, finding{Check: "retention", Level: levelNote, Message: q.Name() + ": its redelivery settings are not read"})
		} else {
			read, notes, err := hz.Horizon(ctx)
			if err != nil {
				return nil, err
			}
			spans = append(spans, read...)
			for _, n := range notes {
				fs = append(fs, finding{Check: "retention", Level: levelNote, Message: n.Error()})
			}
		}
	}
	if len(spans) == 0 {
		return append(fs, finding{Check: "retention", Level: levelNote,
			Message: ret + ": nothing to compare it with (pass --broker URL, or --redelivery-horizon D)"}), nil
	}
	for _, s := range spans {
		switch {
		case s.Unbounded:
			fs = append(fs, finding{Check: "retention", Level: levelWarning,
				Message: fmt.Sprintf("%s: no limit, against %s: a message that comes back after its record expired is applied again", s.What, ret),
				Fix:     "bound it, or keep every replay within the retention"})
		case s.Duration >= retention:
			fs = append(fs, finding{Check: "retention", Level: levelTrap,
				Message: fmt.Sprintf("%s = %s does not stay under %s: a message that comes back after its record expired is applied again", s.What, days(s.Duration), ret),
				Fix:     fmt.Sprintf("raise the guard's Retention above %s (idem.Options{Retention: ...}), or shorten the broker's setting", days(s.Duration))})
		default:
			fs = append(fs, finding{Check: "retention", Level: levelOK,
				Message: fmt.Sprintf("%s = %s, under %s", s.What, days(s.Duration), ret)})
		}
	}
	return fs, nil
}

// days renders a duration with its day count when it has one.
func days(d time.Duration) string {
	if d >= 24*time.Hour {
		return fmt.Sprintf("%v (%.4g days)", d, d.Hours()/24)
	}
	return d.String()
}

// printReport prints the report, and fails (exit 1) on a trap.
func printReport(c *cobra.Command, asJSON bool, rep doctorReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Examined %s", rep.Store)
	if rep.Where != "" {
		fmt.Fprintf(&b, ", %s", rep.Where)
	}
	b.WriteString(".\n")
	for _, x := range rep.Findings {
		fmt.Fprintf(&b, "%-8s %-9s %s\n", x.Level, x.Check, x.Message)
		if x.Fix != "" && x.Level != levelOK {
			fmt.Fprintf(&b, "%-18s fix: %s\n", "", x.Fix)
		}
	}
	if rep.Traps == 0 {
		b.WriteString("No trap found.\n")
	} else {
		fmt.Fprintf(&b, "%d traps found.\n", rep.Traps)
	}
	if err := printOut(c, asJSON, rep, b.String()); err != nil {
		return err
	}
	if rep.Traps > 0 {
		return silentError{code: exitFailure}
	}
	return nil
}
