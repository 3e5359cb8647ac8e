package dsn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// probeKey is read to check a store: it never exists, so the answer is
// ErrNotFound when the server answers and the schema is there.
var probeKey = idem.Key{Scope: "idem-cli", ID: "probe"}

// probeStore reads probeKey and turns the failure into an error that says
// how to fix it.
func probeStore(s idem.Store, redacted string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := s.Get(ctx, probeKey)
		if err == nil || errors.Is(err, idem.ErrNotFound) {
			return nil
		}
		return classify(err, redacted)
	}
}

// classify wraps a store error in ErrNoSchema or ErrUnreachable when its
// text says so (drivers have no common error types for these).
func classify(err error, redacted string) error {
	msg := strings.ToLower(err.Error())
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("no such table", "does not exist", "doesn't exist", "undefined_table", "sqlstate 42p01", "error 1146"):
		return fmt.Errorf("%w in %s: %v (run: idem migrate --store '%s')", ErrNoSchema, redacted, err, redacted)
	case has("connection refused", "no such host", "i/o timeout", "dial tcp", "context deadline exceeded", "connect: ",
		"network is unreachable", "server closed", "eof"):
		return fmt.Errorf("%w: %s: %v (is the server running and the address right?)", ErrUnreachable, redacted, err)
	}
	return fmt.Errorf("%s: %w", redacted, err)
}
