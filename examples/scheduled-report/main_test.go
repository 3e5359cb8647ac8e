package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
)

// clock is the fleet's clock, moved by the test: leases end when the test
// says, never after a sleep.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var errKilled = errors.New("scheduler killed")

// killable is the store as one scheduler process sees it: once killed, none
// of its writes arrive (no completion, no release, no renewal), as after a
// kill -9, and its records stay in progress.
type killable struct {
	idem.Store
	mu   sync.Mutex
	dead bool
}

func (k *killable) kill() { k.mu.Lock(); k.dead = true; k.mu.Unlock() }

func (k *killable) alive() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return errKilled
	}
	return nil
}

func (k *killable) Claim(ctx context.Context, r idem.ClaimRequest) (idem.Claim, error) {
	if err := k.alive(); err != nil {
		return idem.Claim{}, err
	}
	return k.Store.Claim(ctx, r)
}

func (k *killable) Complete(ctx context.Context, r idem.CompleteRequest) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Store.Complete(ctx, r)
}

func (k *killable) Release(ctx context.Context, r idem.ReleaseRequest) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Store.Release(ctx, r)
}

// Retain forwards to the store's idem.Retainer: the job keeps its finished
// steps through it.
func (k *killable) Retain(ctx context.Context, r idem.RetainRequest) error {
	if err := k.alive(); err != nil {
		return err
	}
	return idem.Retain(ctx, k.Store, r)
}

func (k *killable) Renew(ctx context.Context, r idem.RenewRequest) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Store.Renew(ctx, r)
}

// steps records which steps each scheduler started.
type steps struct {
	mu  sync.Mutex
	ran []string
}

func (s *steps) hook(instance string, then func(step string) error) func(context.Context, string) error {
	return func(_ context.Context, step string) error {
		s.mu.Lock()
		s.ran = append(s.ran, instance+":"+step)
		s.mu.Unlock()
		if then != nil {
			return then(step)
		}
		return nil
	}
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ran)
}

// TestRun has two schedulers fire the same hourly job while one is killed
// in the middle of a run: the report of each hour is produced and mailed
// once, and the run that takes over skips the steps the killed one
// finished.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, pgURL := pgtest.Schema(t, "example_report")
	clk := &clock{now: time.Date(2030, 1, 2, 16, 0, 0, 3e6, time.UTC)}
	const lease = 30 * time.Second
	var out testenv.SyncBuffer
	var ran steps

	// Scheduler A is killed while it publishes the 15:00 report.
	aStore := &killable{}
	inPublish, kill := make(chan struct{}), make(chan struct{})
	a, err := newApp(ctx, config{PostgresURL: pgURL, Instance: "a", Lease: lease, Clock: clk.Now, Out: &out,
		wrapStore: func(s idem.Store) idem.Store { aStore.Store = s; return aStore },
		onStep: ran.hook("a", func(step string) error {
			if step == "publish" {
				close(inPublish)
				<-kill
				aStore.kill()
				return errKilled
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := newApp(ctx, config{PostgresURL: pgURL, Instance: "b", Lease: lease, Clock: clk.Now, Out: &out, onStep: ran.hook("b", nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.pool.Exec(ctx, `INSERT INTO orders (placed_at, amount_cents) VALUES
		('2030-01-02 15:05Z', 1500), ('2030-01-02 15:59:59Z', 700), ('2030-01-02 16:00Z', 990),
		('2030-01-02 16:30Z', 10), ('2030-01-02 14:59Z', 5)`); err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2030, 1, 2, 16, 0, 0, 0, time.UTC) // both schedulers fire for 16:00

	aDone := make(chan error, 1)
	go func() { _, err := a.fire(ctx, tick); aDone <- err }()
	select {
	case <-inPublish:
	case <-ctx.Done():
		t.Fatal("scheduler a never reached publish")
	}
	// B fires the same tick, two seconds later by its clock: A holds it.
	clk.Set(tick.Add(2 * time.Second))
	if _, err := b.fire(ctx, tick); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("b while a runs: %v, want in progress", err)
	}
	close(kill) // kill -9 of a, mid-step
	if err := <-aDone; !errors.Is(err, errKilled) {
		t.Fatalf("a: %v", err)
	}
	// Within the dead run's lease the hour stays taken; after it, B's
	// next try takes it over.
	clk.Set(tick.Add(20 * time.Second))
	if _, err := b.fire(ctx, tick); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("b within the dead run's lease: %v", err)
	}
	clk.Set(tick.Add(lease + 5*time.Second))
	res, err := b.fire(ctx, tick)
	if err != nil || !res.Retaken {
		t.Fatalf("b after the lease: %+v %v, want the hour retaken", res, err)
	}
	var s summary
	if err := json.Unmarshal(res.Value, &s); err != nil || s.Orders != 2 || s.TotalCents != 2200 || !s.Hour.Equal(tick.Add(-time.Hour)) {
		t.Errorf("15:00 report %s (%v): want the 2 orders of 15:00-16:00", res.Value, err)
	}

	// A comes back (a new process) and fires 16:00 again: done.
	a2, err := newApp(ctx, config{PostgresURL: pgURL, Instance: "a2", Lease: lease, Clock: clk.Now, Out: &out, onStep: ran.hook("a2", nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	again, err := a2.fire(ctx, tick)
	if err != nil || again.Outcome != idem.OutcomeDuplicate || string(again.Value) != string(res.Value) {
		t.Errorf("a2 at 16:00: %v %s %v, want the recorded report", again.Outcome, again.Value, err)
	}

	// 17:00: both fire; one report.
	next := tick.Add(time.Hour)
	clk.Set(next.Add(time.Second))
	for _, app := range []*app{b, a2} {
		if _, err := app.fire(ctx, next); err != nil {
			t.Fatalf("17:00: %v", err)
		}
	}

	want := []string{
		"a:count", "a:render", "a:publish", // killed in publish
		"b:publish", "b:mail", // b skipped count and render
		"b:count", "b:render", "b:publish", "b:mail", // the 16:00 hour, by b alone
	}
	if got := ran.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("steps run %v\nwant %v", got, want)
	}
	var reports, mails, hours int
	if err := a2.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM reports), (SELECT count(*) FROM outbox),
		(SELECT count(DISTINCT hour_start) FROM reports)`).Scan(&reports, &mails, &hours); err != nil {
		t.Fatal(err)
	}
	if reports != 2 || mails != 2 || hours != 2 {
		t.Errorf("%d reports for %d hours, %d mails: want one of each per hour", reports, hours, mails)
	}
	var body string
	a2.pool.QueryRow(ctx, `SELECT body FROM reports WHERE hour_start = $1`, tick.Add(-time.Hour)).Scan(&body)
	if body != "Sales 2030-01-02 15:00-16:00 UTC: 2 orders, 22.00 EUR" {
		t.Errorf("report %q", body)
	}
	log := out.String()
	for _, line := range []string{"b: 2030-01-02 15:00: running elsewhere", "b: 2030-01-02 15:00: reported 2 orders, 2200 cents (retaken true, steps done before: [count render])",
		"a2: 2030-01-02 15:00: done before: 2 orders, 2200 cents", "a2: 2030-01-02 16:00: done before: 2 orders, 1000 cents"} {
		if !strings.Contains(log, line) {
			t.Errorf("log lacks %q:\n%s", line, log)
		}
	}
}

// The backfill at start runs the hours no run finished, once; then the
// report fires at each hour's end.
func TestBackfillAndSchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, pgURL := pgtest.Schema(t, "example_report")
	clk := &clock{now: time.Date(2030, 1, 2, 16, 20, 0, 0, time.UTC)}
	var ran steps
	early, err := newApp(ctx, config{PostgresURL: pgURL, Instance: "early", Clock: clk.Now, onStep: ran.hook("early", nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if _, err := early.fire(ctx, time.Date(2030, 1, 2, 14, 0, 0, 0, time.UTC)); err != nil { // 13:00 ran on time
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var waits []time.Duration
	var out testenv.SyncBuffer
	cfg := config{PostgresURL: pgURL, Instance: "r", Clock: clk.Now, Backfill: 4 * time.Hour, Out: &out,
		onStep: ran.hook("r", nil),
		// The scheduler's timer: the test moves the clock to the tick
		// asked for and lets it fire, twice, then stops the scheduler.
		after: func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			ch := make(chan time.Time, 1)
			if len(waits) > 2 {
				stop()
				return ch
			}
			clk.Set(clk.Now().Add(d))
			ch <- clk.Now()
			return ch
		}}
	if err := run(runCtx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if fmt.Sprint(waits) != "[40m0s 1h0m0s 1h0m0s]" {
		t.Errorf("waits %v: want to the next hour, then an hour each", waits)
	}
	var hours []string
	rows, err := early.pool.Query(ctx, `SELECT to_char(hour_start AT TIME ZONE 'UTC', 'HH24') FROM reports ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var h string
		rows.Scan(&h)
		hours = append(hours, h)
	}
	// Backfill: 12:00 to 15:00 with 13:00 done before; then the ticks of
	// 17:00 and 18:00 report 16:00 and 17:00.
	if fmt.Sprint(hours) != "[12 13 14 15 16 17]" {
		t.Errorf("reported hours %v", hours)
	}
	if n := strings.Count(strings.Join(ran.list(), " "), ":count"); n != 6 {
		t.Errorf("%d counts for 6 hours: %v", n, ran.list())
	}
	if !strings.Contains(out.String(), "r: backfill: 4 periods checked") {
		t.Errorf("log:\n%s", out.String())
	}
}
