package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/postgres"
)

// clock is a settable clock for leases: tests move time instead of sleeping.
// A running clock also moves with real time, from where it was set.
type clock struct {
	mu      sync.Mutex
	now     time.Time
	running time.Time // zero: stopped
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 2, 16, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.IsZero() {
		return c.now.Add(time.Since(c.running))
	}
	return c.now
}

// Run lets the clock move with real time from now on.
func (c *clock) Run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = time.Now()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// eachStore runs test against the in-memory store and PostgreSQL.
// Instances of a job in one test share the store, as a fleet shares its
// database.
func eachStore(t *testing.T, test func(t *testing.T, store idem.Store)) {
	t.Run("memory", func(t *testing.T) { test(t, memory.New()) })
	t.Run("postgres", func(t *testing.T) { test(t, pgStore(t)) })
}

// pgStore returns a PostgreSQL store on a table in a schema of the test's own.
func pgStore(t *testing.T) *postgres.Store {
	t.Helper()
	pool, schema, _ := pgtest.Schema(t, "job_test")
	s, err := postgres.New(pool, postgres.Options{Table: schema + ".idem_records"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

var errCrashed = errors.New("test: the process is gone")

// crashable is the store as one process sees it: after crash, nothing that
// process does reaches the store (no completion, no release, no renewal), as
// if it had been killed, and its records stay as they were.
type crashable struct {
	idem.Store
	mu      sync.Mutex
	crashed bool
	renewed chan struct{} // if not nil, told of each successful renewal
	// retained, if not nil, is told of each successful Retain (dropped
	// when full: a reader waits for one made at a time it wants).
	retained chan idem.RetainRequest
	renewals chan idem.RenewRequest // the same for renewals
}

func (c *crashable) crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashed = true
}

func (c *crashable) down() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

func (c *crashable) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if c.down() {
		return idem.Claim{}, errCrashed
	}
	return c.Store.Claim(ctx, req)
}

func (c *crashable) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if c.down() {
		return errCrashed
	}
	return c.Store.Complete(ctx, req)
}

func (c *crashable) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if c.down() {
		return errCrashed
	}
	return c.Store.Release(ctx, req)
}

func (c *crashable) Renew(ctx context.Context, req idem.RenewRequest) error {
	if c.down() {
		return errCrashed
	}
	err := c.Store.Renew(ctx, req)
	if err == nil && c.renewed != nil {
		select {
		case c.renewed <- struct{}{}:
		default:
		}
	}
	if err == nil && c.renewals != nil {
		select {
		case c.renewals <- req:
		default:
		}
	}
	return err
}

// counter counts calls by name.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) inc(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// within fails the test if ch does not deliver in a generous time: a guard
// against a hang, never a measure of speed.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

func (c *crashable) Retain(ctx context.Context, req idem.RetainRequest) error {
	if c.down() {
		return errCrashed
	}
	err := idem.Retain(ctx, c.Store, req)
	if err == nil && c.retained != nil {
		select {
		case c.retained <- req:
		default:
		}
	}
	return err
}
