package e2e_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/postgres"
)

// workers is the concurrency of every consumer: Kafka's partitions (one
// worker each), the NATS and RabbitMQ workers, idem's Options.Concurrency.
const workers = 8

// defaultMessages is how many messages a benchmark run consumes unless
// IDEM_E2E_MESSAGES says otherwise; testMessages, a test run.
const (
	defaultMessages = 10000
	testMessages    = 200
)

// runTimeout bounds one run: a side that stops settling fails the run
// instead of hanging it.
const runTimeout = 10 * time.Minute

// run counts the messages a side settled (its row committed and the message
// acknowledged) and times them.
type run struct {
	n           int64
	count       atomic.Int64
	first, last atomic.Int64 // UnixNano of the first and the n-th settled message
	failed      atomic.Int64 // reports of idem's consumers that were not acks
	lastFailure atomic.Value // the last such report's error, for the message
	done        chan struct{}
	times       []int64 // UnixNano of each settled message, in settling order
}

func newRun(n int) *run { return &run{n: int64(n), done: make(chan struct{}), times: make([]int64, n)} }

// settled counts one message done.
func (r *run) settled() {
	now := time.Now().UnixNano()
	k := r.count.Add(1)
	if k <= r.n {
		r.times[k-1] = now
	}
	switch k {
	case 1:
		r.first.Store(now)
		if r.n == 1 {
			r.last.Store(now)
			close(r.done)
		}
	case r.n:
		r.last.Store(now)
		close(r.done)
	}
}

// hooks count idem's consumers' acks as settled messages, and anything
// else as a failure of the run (nothing in it should be retried or
// dead-lettered).
func hooks[M any](r *run) broker.Hooks[M] {
	return broker.Hooks[M]{AfterSettle: func(_ context.Context, _ M, rep broker.Report) {
		if rep.Action == idem.ActionAck && rep.BrokerErr == nil {
			r.settled()
			return
		}
		r.failed.Add(1)
		if rep.Err != nil {
			r.lastFailure.Store(rep.Err)
		} else if rep.BrokerErr != nil {
			r.lastFailure.Store(rep.BrokerErr)
		}
	}}
}

// steady is the time from the first settled message to the last: startup
// (connecting, joining a group, the first fetch) is left out on both sides.
func (r *run) steady() time.Duration { return time.Duration(r.last.Load() - r.first.Load()) }

// side is one consumer of a loaded destination: it consumes until ctx ends,
// calling r.settled for each message whose row is committed and which is
// acknowledged.
type side func(ctx context.Context, r *run) error

// sideSpec names a side and says whether it writes idem records.
type sideSpec struct {
	name   string
	marked bool
}

// brokerSpec is one broker: its sides, its pairs (a hand-written side and
// the idem side to compare with it), and load, which creates a fresh
// destination holding n messages and returns its sides.
type brokerSpec struct {
	name  string
	sides []sideSpec
	pairs []pair
	load  func(t testing.TB, d *db, n int) map[string]side
}

// pair is a comparison: idem's side against the hand-written one doing the
// same work per message.
type pair struct{ name, hand, idem string }

var brokers = []brokerSpec{
	specOf("kafka", "idem-2p-batch", loadKafka),
	specOf("nats", "idem-2p", loadNATS),
	specOf("amqp", "idem-2p", loadAMQP),
}

// messages is the number of messages a benchmark run consumes.
func messages(t testing.TB) int {
	v := os.Getenv("IDEM_E2E_MESSAGES")
	if v == "" {
		return defaultMessages
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("IDEM_E2E_MESSAGES=%q: want a positive number", v)
	}
	return n
}

// consume loads a fresh destination with n messages, runs the side named
// s on it until every message is settled, stops it, and checks the rows.
func consume(t testing.TB, d *db, br brokerSpec, s sideSpec, n int) *run {
	t.Helper()
	return start(t, d, br, s, n)()
}

// start loads a fresh destination with n messages and starts the side
// named s on it; the function it returns waits until every message is
// settled, stops the side, and checks the rows.
func start(t testing.TB, d *db, br brokerSpec, s sideSpec, n int) (wait func() *run) {
	t.Helper()
	d.reset(t)
	fn := br.load(t, d, n)[s.name]
	if fn == nil {
		t.Fatalf("%s has no side %q", br.name, s.name)
	}
	r := newRun(n)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- fn(ctx, r) }()
	return func() *run {
		t.Helper()
		defer cancel()
		return r.wait(t, br, s, d, errc, cancel)
	}
}

func (r *run) wait(t testing.TB, br brokerSpec, s sideSpec, d *db, errc <-chan error, cancel func()) *run {
	t.Helper()
	n := int(r.n)
	timeout := time.NewTimer(runTimeout)
	defer timeout.Stop()
	select {
	case <-r.done:
	case err := <-errc:
		t.Fatalf("%s/%s stopped after %d of %d messages: %v", br.name, s.name, r.count.Load(), n, err)
	case <-timeout.C:
		t.Fatalf("%s/%s settled %d of %d messages in %v", br.name, s.name, r.count.Load(), n, runTimeout)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("%s/%s: %v", br.name, s.name, err)
	}
	if f := r.failed.Load(); f > 0 {
		t.Fatalf("%s/%s: %d reports were not acks (last error: %v)", br.name, s.name, f, r.lastFailure.Load())
	}
	d.check(t, n, s.marked)
	return r
}

func (br brokerSpec) side(t testing.TB, name string) sideSpec {
	for _, s := range br.sides {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("%s has no side %q", br.name, name)
	return sideSpec{}
}

// TestE2E runs every side of every broker on a few messages and checks that
// each wrote exactly one business row per message (and idem's sides one
// record per message).
func TestE2E(t *testing.T) {
	for _, br := range brokers {
		t.Run(br.name, func(t *testing.T) {
			d := newDB(t)
			for _, s := range br.sides {
				t.Run(s.name, func(t *testing.T) { consume(t, d, br, s, testMessages) })
			}
		})
	}
}

// BenchmarkE2E runs each side on its own, for profiles
// (-bench 'E2E/kafka/idem-tx$' -cpuprofile ...): msgs/s is the rate from
// the first settled message to the last. IDEM_E2E_MESSAGES sets the
// messages per run (default 10000).
func BenchmarkE2E(b *testing.B) {
	n := messages(b)
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			d := newDB(b)
			for _, s := range br.sides {
				b.Run(s.name, func(b *testing.B) {
					var msgs int64
					var steady time.Duration
					for range b.N {
						r := consume(b, d, br, s, n)
						msgs += r.n - 1
						steady += r.steady()
					}
					b.ReportMetric(float64(msgs)/steady.Seconds(), "msgs/s")
				})
			}
		})
	}
}

// BenchmarkE2ERatio runs the two sides of each pair one after the other,
// in alternating order (the machine is shared and noisy: interleave, and
// repeat with -count), and reports each side's msgs/s and their ratio
// idem ÷ hand.
func BenchmarkE2ERatio(b *testing.B) {
	n := messages(b)
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			d := newDB(b)
			for _, p := range br.pairs {
				flip := false
				b.Run(p.name, func(b *testing.B) {
					var hand, mine float64
					for range b.N {
						order := []string{p.hand, p.idem}
						if flip {
							order[0], order[1] = order[1], order[0]
						}
						flip = !flip
						for _, name := range order {
							r := consume(b, d, br, br.side(b, name), n)
							rate := float64(r.n-1) / r.steady().Seconds()
							if name == p.hand {
								hand += rate
							} else {
								mine += rate
							}
						}
					}
					b.ReportMetric(hand/float64(b.N), "hand-msgs/s")
					b.ReportMetric(mine/float64(b.N), "idem-msgs/s")
					b.ReportMetric(mine/hand, "idem/hand")
				})
			}
		})
	}
}

// sidesOf builds a broker's four sides on its message type M from how a
// message gives its id and body, the broker's hand-written loop (running
// work for each message), and its idem consumer built from a
// transactional handler (tx) or a two-phase one (twoPhase, the side named
// twoPhaseName):
//
//   - hand: the business insert in a transaction per message;
//   - hand-exec: the insert alone, a statement in its own transaction;
//   - idem-tx: idem's transactional inbox, the marker in the insert's
//     transaction;
//   - idem-tx-first: the same with the store's MarkWithFirstStatement, the
//     marker sent in one round trip with BEGIN and the insert;
//   - the two-phase side: the insert alone between idem's claim and
//     complete.
func sidesOf[M any](d *db, id func(M) string, data func(M) []byte,
	hand func(ctx context.Context, r *run, work func(context.Context, M) error) error,
	tx func(ctx context.Context, r *run, store *postgres.Store, fn func(context.Context, pgx.Tx, M) ([]byte, error)) error,
	twoPhaseName string,
	twoPhase func(ctx context.Context, r *run, fn func(context.Context, M) ([]byte, error)) error,
) map[string]side {
	return map[string]side{
		"hand": func(ctx context.Context, r *run) error {
			return hand(ctx, r, func(ctx context.Context, m M) error { return d.insertTx(ctx, id(m), data(m)) })
		},
		"hand-exec": func(ctx context.Context, r *run) error {
			return hand(ctx, r, func(ctx context.Context, m M) error { return insert(ctx, d.pool, id(m), data(m)) })
		},
		"idem-tx": func(ctx context.Context, r *run) error {
			return tx(ctx, r, d.store, func(ctx context.Context, tx pgx.Tx, m M) ([]byte, error) {
				return nil, insert(ctx, tx, id(m), data(m))
			})
		},
		"idem-tx-first": func(ctx context.Context, r *run) error {
			return tx(ctx, r, d.first, func(ctx context.Context, tx pgx.Tx, m M) ([]byte, error) {
				return nil, insert(ctx, tx, id(m), data(m))
			})
		},
		twoPhaseName: func(ctx context.Context, r *run) error {
			return twoPhase(ctx, r, func(ctx context.Context, m M) ([]byte, error) {
				return nil, insert(ctx, d.pool, id(m), data(m))
			})
		},
	}
}

// specOf is a broker's spec with the four sides of sidesOf, paired: hand
// with idem-tx, hand-exec with the two-phase side.
func specOf(name, twoPhaseName string, load func(t testing.TB, d *db, n int) map[string]side) brokerSpec {
	return brokerSpec{
		name: name,
		sides: []sideSpec{
			{"hand", false}, {"idem-tx", true}, {"idem-tx-first", true},
			{"hand-exec", false}, {twoPhaseName, true},
		},
		pairs: []pair{{"tx", "hand", "idem-tx"}, {"tx-first", "hand", "idem-tx-first"}, {strings.TrimPrefix(twoPhaseName, "idem-"), "hand-exec", twoPhaseName}},
		load:  load,
	}
}

// BenchmarkE2ETogether runs the two sides of each pair at the same time,
// each on a destination and a database schema of its own, so that both
// meet the same load from the rest of the machine; each side's msgs/s
// counts its messages settled while both were running (from the later
// first message to the earlier last one). The sides compete for the
// machine and the server: the ratio is that of their costs per message
// more than of their rates alone.
func BenchmarkE2ETogether(b *testing.B) {
	n := messages(b)
	for _, br := range brokers {
		b.Run(br.name, func(b *testing.B) {
			dh, di := newDB(b), newDB(b)
			for _, p := range br.pairs {
				b.Run(p.name, func(b *testing.B) {
					var hand, mine float64
					for range b.N {
						wh := start(b, dh, br, br.side(b, p.hand), n)
						wi := start(b, di, br, br.side(b, p.idem), n)
						rh, ri := wh(), wi()
						from := max(rh.times[0], ri.times[0])
						to := min(rh.times[n-1], ri.times[n-1])
						if to <= from {
							b.Fatalf("%s and %s did not run at the same time", p.hand, p.idem)
						}
						hand += rh.rateWithin(from, to)
						mine += ri.rateWithin(from, to)
					}
					b.ReportMetric(hand/float64(b.N), "hand-msgs/s")
					b.ReportMetric(mine/float64(b.N), "idem-msgs/s")
					b.ReportMetric(mine/hand, "idem/hand")
				})
			}
		})
	}
}

// rateWithin is the rate of the messages r settled between from and to
// (UnixNano).
func (r *run) rateWithin(from, to int64) float64 {
	k := 0
	for _, at := range r.times {
		if at >= from && at <= to {
			k++
		}
	}
	return float64(k) / time.Duration(to-from).Seconds()
}
