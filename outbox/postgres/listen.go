package outboxpostgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen implements outbox.Notifier: it LISTENs on the store's channel on
// a connection of its own, taken from the pool and closed at the end (a
// listening connection never goes back to the pool), and calls wake for
// each notification until ctx ends, and once more NotifyInterval later,
// for the transactions that committed after it without a NOTIFY of their
// own (see Options.NotifyInterval).
func (s *Store) Listen(ctx context.Context, wake func()) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrapErr("listen", err)
	}
	conn := c.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return wrapErr("listen", err)
	}
	trailing := time.AfterFunc(time.Hour, wake)
	trailing.Stop()
	defer trailing.Stop()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outboxpostgres: listen on %q: %w", s.channel, err)
		}
		wake()
		trailing.Reset(s.opts.NotifyInterval + 5*time.Millisecond)
	}
}
