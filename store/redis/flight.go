package redisidem

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// fencedCall is one complete, release or renew script run waiting for its
// turn in a flight.
type fencedCall struct {
	ctx    context.Context
	script *goredis.Script
	key    string
	args   []any

	n   int64
	err error

	// turn receives true when this call leads the next flight (its batch is
	// in batch), false when another leader has filled in n and err.
	turn  chan bool
	batch []*fencedCall
}

// flights coalesces the fenced scripts of concurrent callers, the way a
// database coalesces commits: a call that finds fewer than maxOut flights
// out sends its own script at once, exactly as without coalescing; calls
// that arrive while they are out queue up, and when a flight lands the first
// of them sends the whole queue as one pipeline. Under load a consumer's
// completion then costs a fraction of a round trip instead of one (its claim
// stays a round trip of its own), and at low load nothing waits.
//
// Each call is still one atomic script on its own key, so coalescing changes
// no outcome: it only shares the write and read of the connection between
// calls that were in flight together anyway.
type flights struct {
	mu    sync.Mutex
	out   int // flights out
	queue []*fencedCall
}

// maxOut is how many flights may be out at once. Two measured best at 16
// workers (BENCH.md): with one, Redis waits while a flight's replies travel
// back and the next pipeline is built; with more, calls go alone that could
// have shared a round trip.
const maxOut = 2

// run sends c, alone or with the calls queued behind a flight, and returns
// the script's integer reply.
func (f *flights) run(client goredis.UniversalClient, c *fencedCall) (int64, error) {
	f.mu.Lock()
	if f.out >= maxOut {
		c.turn = make(chan bool, 1)
		f.queue = append(f.queue, c)
		f.mu.Unlock()
		if lead := <-c.turn; !lead {
			return c.n, c.err
		}
	} else {
		f.out++
		f.mu.Unlock()
		c.batch = []*fencedCall{c}
	}
	defer f.land()
	defer func() {
		// A panic in the client (a hook, say) must not leave the others
		// waiting for ever: they get an error, and this caller the panic.
		if p := recover(); p != nil {
			for _, o := range c.batch {
				if o != c {
					o.err = fmt.Errorf("redisidem: panic in a shared pipeline: %v", p)
					o.turn <- false
				}
			}
			panic(p)
		}
	}()
	execFenced(client, c.batch)
	for _, o := range c.batch {
		if o != c {
			o.turn <- false
		}
	}
	return c.n, c.err
}

// land ends the flight out: the first queued call leads the queue as the
// next flight, or nothing is in flight any more.
func (f *flights) land() {
	f.mu.Lock()
	if len(f.queue) == 0 {
		f.out--
		f.mu.Unlock()
		return
	}
	next := f.queue[0]
	next.batch, f.queue = f.queue, nil
	f.mu.Unlock()
	next.turn <- true
}

// execFenced runs batch's scripts and fills in each call's reply. One call
// is a plain EVALSHA under its caller's context; several are one pipeline
// under batchContext. Calls that found no cached script (NOSCRIPT: a
// restart, a failover) did not run, so they alone are sent again with the
// source.
func execFenced(client goredis.UniversalClient, batch []*fencedCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.n, c.err = c.script.Run(c.ctx, client, []string{c.key}, c.args...).Int64()
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	cmds := make([]*goredis.Cmd, len(batch))
	pipe := client.Pipeline()
	for i, c := range batch {
		cmds[i] = c.script.EvalSha(ctx, pipe, []string{c.key}, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command is judged on its own below
	var missing []int
	for i, c := range batch {
		c.n, c.err = cmds[i].Int64()
		if c.err != nil && isNoScript(c.err) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return
	}
	pipe = client.Pipeline()
	for _, i := range missing {
		c := batch[i]
		cmds[i] = c.script.Eval(ctx, pipe, []string{c.key}, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range missing {
		batch[i].n, batch[i].err = cmds[i].Int64()
	}
}

// batchContext is the context a shared pipeline runs under: the leader's
// values without its cancellation (a caller must not fail because another
// gave up), ending at the latest deadline of the callers when every one of
// them has a deadline; otherwise the client's own timeouts bound the round
// trip.
func batchContext(batch []*fencedCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
