// Command scheduled-report builds an hourly sales report from the orders in
// PostgreSQL, publishes it and mails it, once per hour however many
// schedulers fire it: run it on every instance of a service, through a
// deploy overlap, and kill it mid-run; each hour's report is produced once,
// and a run that takes over from a killed one skips the steps it finished.
//
//	IDEM_POSTGRES_URL=postgres://localhost/shop go run .
//
// At each hour it reports the hour that just ended (the window of the tick,
// never of the clock at start: a run that starts late still reports its
// hour), and at start it backfills the hours of the last day that no run
// finished.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/job"
	"github.com/idemgo/idem/store/postgres"
)

type config struct {
	PostgresURL string
	Instance    string        // who this scheduler is, for the log
	Every       time.Duration // the report's period; default an hour
	Lease       time.Duration // a crashed run's window is retaken this long after its last renewal
	Backfill    time.Duration // at start, run the windows of this past period no run finished
	Clock       func() time.Time
	Out         io.Writer

	// For tests: wrap the store as this instance sees it, and hear of
	// each step as it starts (an error stops the step there).
	wrapStore func(idem.Store) idem.Store
	onStep    func(ctx context.Context, step string) error
	after     func(time.Duration) <-chan time.Time // default time.After
}

func main() {
	cfg := config{Out: os.Stdout}
	host, _ := os.Hostname()
	flag.StringVar(&cfg.PostgresURL, "postgres", os.Getenv("IDEM_POSTGRES_URL"), "PostgreSQL URL")
	flag.StringVar(&cfg.Instance, "instance", fmt.Sprintf("%s/%d", host, os.Getpid()), "this scheduler's name")
	flag.DurationVar(&cfg.Every, "every", time.Hour, "report period")
	flag.DurationVar(&cfg.Backfill, "backfill", 24*time.Hour, "at start, run the unfinished windows of this past period")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// run backfills, then fires the report at every period's end until ctx ends.
func run(ctx context.Context, cfg config) error {
	a, err := newApp(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	a.backfill(ctx)
	return a.schedule(ctx)
}

// backfill runs the periods that ended within cfg.Backfill and that no run
// finished (this scheduler was down, or a run failed); those done cost a
// claim each.
func (a *app) backfill(ctx context.Context) {
	if a.cfg.Backfill <= 0 {
		return
	}
	now := a.cfg.Clock()
	res, err := a.report.Backfill(ctx, now.Add(-a.cfg.Backfill), now.Add(-a.cfg.Every), a.build)
	if err != nil {
		a.logf("backfill stopped: %v", err)
		return
	}
	a.logf("backfill: %d periods checked", len(res))
}

// schedule fires the report at the end of every period until ctx ends.
func (a *app) schedule(ctx context.Context) error {
	now := a.cfg.Clock()
	for {
		// The tick is the period's scheduled end, the same on every
		// instance, whenever this one's timer happens to fire.
		tick := now.Truncate(a.cfg.Every).Add(a.cfg.Every)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.cfg.after(tick.Sub(a.cfg.Clock())):
		}
		a.fire(ctx, tick)
		now = tick
	}
}

// app is one scheduler: its store, its job and its database.
type app struct {
	cfg    config
	pool   *pgxpool.Pool
	report *job.Job
}

func newApp(ctx context.Context, cfg config) (*app, error) {
	if cfg.Every <= 0 {
		cfg.Every = time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, pool: pool}
	if err := a.setup(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return a, nil
}

func (a *app) setup(ctx context.Context) error {
	records, err := postgres.New(a.pool, postgres.Options{Table: "idem_records"})
	if err != nil {
		return err
	}
	if err := records.Migrate(ctx); err != nil {
		return err
	}
	if _, err := a.pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS orders (
			id bigserial PRIMARY KEY, placed_at timestamptz NOT NULL, amount_cents bigint NOT NULL);
		CREATE TABLE IF NOT EXISTS reports (
			report_key text PRIMARY KEY, hour_start timestamptz NOT NULL, body text NOT NULL);
		CREATE TABLE IF NOT EXISTS outbox (
			mail_key text PRIMARY KEY, recipient text NOT NULL, body text NOT NULL)`); err != nil {
		return err
	}
	var store idem.Store = records
	if a.cfg.wrapStore != nil {
		store = a.cfg.wrapStore(store)
	}
	a.report, err = job.New(store, job.Options{
		Name:     "hourly-sales-report",
		Schedule: job.Every(a.cfg.Every),
		Lease:    a.cfg.Lease,
		// A run that crashed is retaken and resumes after its last finished
		// step; the mail step's outbox row is keyed, so a repeat is a no-op.
		Stale: idem.StaleRetake,
		Clock: a.cfg.Clock,
	})
	return err
}

func (a *app) Close() { a.pool.Close() }

// summary is the recorded result of a window: what every later trigger of
// it gets back.
type summary struct {
	Hour       time.Time `json:"hour"`
	Orders     int64     `json:"orders"`
	TotalCents int64     `json:"total_cents"`
	ReportKey  string    `json:"report_key"`
}

// fire runs the report for tick, the scheduled end of a period, and logs
// what happened. The period that ended is the run's window: the 16:00 tick
// reports 15:00-16:00, on whichever instance and however late it starts.
func (a *app) fire(ctx context.Context, tick time.Time) (job.Result, error) {
	res, err := a.report.Run(ctx, tick.Add(-a.cfg.Every), a.build)
	w := res.Window.Start.Format("2006-01-02 15:04")
	var s summary
	switch {
	case errors.Is(err, idem.ErrInProgress):
		a.logf("%s: running elsewhere", w)
	case err != nil:
		a.logf("%s: failed: %v", w, err)
	case json.Unmarshal(res.Value, &s) != nil:
		a.logf("%s: unreadable result %q", w, res.Value)
	case res.Outcome == idem.OutcomeDuplicate:
		a.logf("%s: done before: %d orders, %d cents", w, s.Orders, s.TotalCents)
	default:
		a.logf("%s: reported %d orders, %d cents (retaken %v, steps done before: %v)", w, s.Orders, s.TotalCents, res.Retaken, res.Skipped)
	}
	return res, err
}

func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.cfg.Out, a.cfg.Instance+": "+format+"\n", args...)
}

// build is the job: four steps, each recorded as it finishes, so a run that
// takes over from a crashed one goes on from the first step not done.
func (a *app) build(ctx context.Context, run *job.Run) ([]byte, error) {
	w := run.Window
	var s summary
	counted, err := run.Step(ctx, "count", a.step("count", func(ctx context.Context) ([]byte, error) {
		s := summary{Hour: w.Start}
		err := a.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount_cents), 0) FROM orders
			WHERE placed_at >= $1 AND placed_at < $2`, w.Start, w.End).Scan(&s.Orders, &s.TotalCents)
		if err != nil {
			return nil, err
		}
		return json.Marshal(s)
	}))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(counted, &s); err != nil {
		return nil, err
	}
	body, err := run.Step(ctx, "render", a.step("render", func(ctx context.Context) ([]byte, error) {
		return fmt.Appendf(nil, "Sales %s-%s UTC: %d orders, %.2f EUR", w.Start.UTC().Format("2006-01-02 15:04"),
			w.End.UTC().Format("15:04"), s.Orders, float64(s.TotalCents)/100), nil
	}))
	if err != nil {
		return nil, err
	}
	// Steps with effects outside this run carry keys derived from the
	// step's: a repeat after a crash between the effect and its record is
	// absorbed downstream (here by the tables' primary keys).
	s.ReportKey = run.StepKey("publish").ID
	if _, err := run.Step(ctx, "publish", a.step("publish", func(ctx context.Context) ([]byte, error) {
		_, err := a.pool.Exec(ctx, `INSERT INTO reports (report_key, hour_start, body) VALUES ($1, $2, $3)
			ON CONFLICT (report_key) DO NOTHING`, s.ReportKey, w.Start, body)
		return nil, err
	})); err != nil {
		return nil, err
	}
	if _, err := run.Step(ctx, "mail", a.step("mail", func(ctx context.Context) ([]byte, error) {
		_, err := a.pool.Exec(ctx, `INSERT INTO outbox (mail_key, recipient, body) VALUES ($1, $2, $3)
			ON CONFLICT (mail_key) DO NOTHING`, idem.DeriveKey(ctx, "mail"), "sales@example.com", body)
		return nil, err
	})); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// step wraps a step's work with the test hook.
func (a *app) step(name string, fn idem.Handler) idem.Handler {
	return func(ctx context.Context) ([]byte, error) {
		if a.cfg.onStep != nil {
			if err := a.cfg.onStep(ctx, name); err != nil {
				return nil, err
			}
		}
		return fn(ctx)
	}
}
