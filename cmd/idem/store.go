package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// storeFlags are the flags every store command shares.
type storeFlags struct {
	dsn     string
	json    bool
	timeout time.Duration
	ctx     context.Context // bounded by timeout, once withTimeout made it
}

func (f *storeFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.dsn, "store", "", "store DSN (default $IDEM_STORE): "+dsnHelp+"; every form is listed above")
	c.Flags().BoolVar(&f.json, "json", false, "print JSON for scripts instead of a table")
	c.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
	c.Long = withDSNForms(c.Long)
	if run := c.RunE; run != nil {
		c.RunE = func(c *cobra.Command, a []string) error { return f.timedOut(run(c, a)) }
	}
}

// timedOut says so when err came from the command's --timeout running out,
// rather than leaving a bare "context deadline exceeded" to be read as a
// broken store.
func (f *storeFlags) timedOut(err error) error {
	if err == nil || f.ctx == nil || !errors.Is(f.ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("--timeout %v ran out (pass a longer one): %w", f.timeout, err)
}

const dsnHelp = "memory://, sqlite://PATH, postgres://USER@HOST:PORT/DB, mysql://USER@HOST:PORT/DB, redis://HOST:PORT, cosmos://HOST:PORT"

// withDSNForms appends the reference of DSN forms and parameters to a
// command's long help.
func withDSNForms(long string) string { return long + "\n\n" + dsn.Forms }

// open opens the store and checks that its server answers and takes the
// login; with probe, that the schema exists too. Commands fail early, with
// a fix.
func (f *storeFlags) open(ctx context.Context, probe bool) (*dsn.Handle, error) {
	raw := f.dsn
	if raw == "" {
		raw = os.Getenv("IDEM_STORE")
	}
	if raw == "" {
		return nil, usagef("no store given: pass --store DSN or set IDEM_STORE (%s)", dsnHelp)
	}
	h, err := dsn.Open(ctx, raw)
	if err != nil {
		if errors.Is(err, dsn.ErrBadDSN) || errors.Is(err, dsn.ErrUnknownScheme) {
			return nil, usageError{err}
		}
		return nil, err
	}
	check := h.Ping
	if probe {
		check = h.Probe
	}
	if check != nil {
		if err := check(ctx); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// withTimeout bounds a store command.
func (f *storeFlags) withTimeout(c *cobra.Command) (context.Context, context.CancelFunc) {
	if f.timeout <= 0 {
		f.timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(c.Context(), f.timeout)
	f.ctx = ctx
	return ctx, cancel
}

// inspector returns the store's Inspector or a clear error.
func inspector(h *dsn.Handle, cmd string) (idem.Inspector, error) {
	in, ok := h.Store.(idem.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the %s store cannot list records, so 'idem %s' is unavailable for it (use 'idem show SCOPE KEY')",
			dsn.ErrNotSupported, h.Scheme, cmd)
	}
	return in, nil
}
