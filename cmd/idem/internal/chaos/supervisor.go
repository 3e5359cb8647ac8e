package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// child is one process the harness started.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	// signaled is the signal that ended it, if any.
	signaled syscall.Signal
}

func spawn(cfg Config, cc childConfig, logPath string) (*child, error) {
	js, _ := json.Marshal(cc)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Exe, cfg.Args...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", cc.Role, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		log.Close()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			c.signaled = ws.Signal()
		}
		close(c.done)
	}()
	return c, nil
}

func (c *child) kill() { c.cmd.Process.Signal(syscall.SIGKILL) }

// fault is one event of the supervisor's schedule, due when the settled
// share of the stream reaches at.
type fault struct {
	at   float64
	kind string // "kill", "store", "broker"
	slot int
}

// schedule draws the faults from the seed: random kills, store and broker
// restarts, spread over 5%..85% of the run.
func schedule(cfg Config) []fault {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xfa17))
	var fs []fault
	add := func(n int, kind string) {
		for range n {
			fs = append(fs, fault{at: 0.05 + 0.8*rng.Float64(), kind: kind, slot: rng.IntN(cfg.Consumers)})
		}
	}
	add(cfg.RandomKills, "kill")
	add(cfg.StoreRestarts, "store")
	add(cfg.BrokerRestarts, "broker")
	sort.Slice(fs, func(i, j int) bool { return fs[i].at < fs[j].at })
	return fs
}

// faultHorizon is the settled share past which no new kill is armed, so
// the run converges.
const faultHorizon = 0.9

// arming draws the kill point of one consumer incarnation from the seed.
func arming(cfg Config, slot, incarnation, unique int) (point string, after int) {
	if cfg.NoPointKills {
		return "", 0
	}
	rng := rand.New(rand.NewPCG(cfg.Seed^uint64(slot)<<32, uint64(incarnation)))
	r := rng.Float64()
	span := min(max(8, unique/(cfg.Consumers*3)), 250)
	switch {
	case r < 0.45:
		return pointSettle, 1 + rng.IntN(span)
	case r < 0.75:
		return pointEffect, 1 + rng.IntN(span)
	}
	return "", 0
}

// names of one pass's broker objects and tables.
func passNames(naive bool) (stream, subject, dlqStream, dlqSubject string, t tables) {
	if naive {
		return "CHAOS_NAIVE", "chaos.naive.orders", "CHAOS_NAIVE_DLQ", "chaos.naive.dlq",
			tables{"idem_chaos_naive_charges", "idem_chaos_naive_balances", ""}
	}
	return "CHAOS_ORDERS", "chaos.orders", "CHAOS_DLQ", "chaos.dlq",
		tables{"idem_chaos_charges", "idem_chaos_balances", "idem_chaos_records"}
}

const durableName = "billing"

// runPass runs one pass: it sets up the streams and tables, starts the
// consumers and the producer, injects the faults, waits until every
// message is settled and reads the effects.
func runPass(ctx context.Context, cfg Config, e *env, plan *Plan, naive bool) (*Pass, error) {
	start := time.Now()
	p := &Pass{Consumer: "idem"}
	if naive {
		p.Consumer = "naive"
	}
	stream, subject, dlqStream, dlqSubject, tbl := passNames(naive)
	nc, js, err := connectNATS(e.broker.URL())
	if err != nil {
		return nil, fmt.Errorf("chaos: NATS at %s: %w", e.broker.URL(), err)
	}
	defer func() { nc.Close() }()
	if err := setupStreams(ctx, js, stream, subject, dlqStream, dlqSubject); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("idemchaos:%d", time.Now().UnixNano())
	if err := setupStore(ctx, cfg, e, tbl, prefix); err != nil {
		return nil, err
	}

	var settled atomic.Int64
	total := int64(len(plan.Msgs))
	var mu sync.Mutex
	slots := make([]*child, cfg.Consumers)
	incarnations := make([]int, cfg.Consumers)
	randomKilled := map[*child]bool{}
	stopping := false
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var startSlot func(slot int) error
	startSlot = func(slot int) error {
		mu.Lock()
		defer mu.Unlock()
		if stopping {
			return nil
		}
		cc := childConfig{Role: "consumer", Store: cfg.Store, Naive: naive, StoreURL: e.store.URL(), BrokerURL: e.broker.URL(),
			Stream: stream, Durable: durableName, DLQSubject: dlqSubject, Tables: tbl, BankURL: e.bankURL,
			Concurrency: cfg.Concurrency, Lease: 2 * time.Second, Prefix: prefix}
		if float64(settled.Load()) < faultHorizon*float64(total) {
			cc.KillAt, cc.KillAfter = arming(cfg, slot, incarnations[slot], plan.Unique())
		}
		incarnations[slot]++
		c, err := spawn(cfg, cc, filepath.Join(e.logs, fmt.Sprintf("%s-consumer-%d.log", p.Consumer, slot)))
		if err != nil {
			return err
		}
		slots[slot] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-c.done
			mu.Lock()
			switch {
			case stopping:
			case randomKilled[c]:
				p.RandomKills++
			case c.signaled == syscall.SIGKILL:
				p.PointKills++
			case c.cmd.ProcessState.ExitCode() == 2: // a panic, a bad configuration
				p.Crashes++
			default:
				p.Exits++
			}
			again := !stopping
			mu.Unlock()
			if again {
				time.Sleep(100 * time.Millisecond)
				if err := startSlot(slot); err != nil {
					fmt.Fprintf(cfg.Progress, "chaos: restart consumer %d: %v\n", slot, err)
				}
			}
		}()
		return nil
	}
	for s := range cfg.Consumers {
		if err := startSlot(s); err != nil {
			return nil, err
		}
	}
	defer func() {
		mu.Lock()
		stopping = true
		for _, c := range slots {
			if c != nil {
				c.kill()
			}
		}
		mu.Unlock()
		wg.Wait()
	}()

	produced := make(chan error, 1)
	go func() { produced <- produce(runCtx, e.broker.URL(), subject, plan, &settled) }()

	faults := schedule(cfg)
	producerDone := false
	quiet := 0
	deadline := time.Time{}
	lastReport := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-produced:
			if err != nil {
				return nil, fmt.Errorf("chaos: producer: %w", err)
			}
			producerDone = true
			deadline = time.Now().Add(cfg.Settle)
		case <-tick.C:
		}
		pending, ackPending, last, ok := progress(ctx, js, stream)
		if ok {
			settled.Store(int64(last) - int64(pending) - int64(ackPending))
		}
		for len(faults) > 0 && float64(settled.Load()) >= faults[0].at*float64(total) {
			f := faults[0]
			faults = faults[1:]
			switch f.kind {
			case "kill":
				mu.Lock()
				if c := slots[f.slot]; c != nil {
					randomKilled[c] = true
					c.kill()
				}
				mu.Unlock()
			case "store":
				fmt.Fprintf(cfg.Progress, "chaos: %s: restarting the store\n", p.Consumer)
				if err := e.store.Restart(ctx); err != nil {
					return nil, err
				}
				p.StoreRestart++
			case "broker":
				fmt.Fprintf(cfg.Progress, "chaos: %s: restarting the broker\n", p.Consumer)
				if err := e.broker.Restart(ctx); err != nil {
					return nil, err
				}
				p.BrokerRestrt++
			}
		}
		if time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			mu.Lock()
			fmt.Fprintf(cfg.Progress, "chaos: %s: settled %d/%d, kills %d, restarts %d\n",
				p.Consumer, settled.Load(), total, p.Kills(), p.Restarts())
			mu.Unlock()
		}
		if producerDone && ok && pending == 0 && ackPending == 0 {
			if quiet++; quiet >= 3 {
				break
			}
		} else {
			quiet = 0
		}
		if producerDone && time.Now().After(deadline) {
			p.Problems = append(p.Problems, fmt.Sprintf("%s: messages still unsettled %s after the producer finished", p.Consumer, cfg.Settle))
			break
		}
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	if info, err := consumerInfo(ctx, js, stream); err == nil {
		p.Deliveries = int(info.Delivered.Consumer)
	}
	p.Messages = len(plan.Msgs)
	if err := verdict(ctx, cfg, e, js, plan, p, tbl, dlqStream, prefix, naive); err != nil {
		return nil, err
	}
	p.Wall = time.Since(start)
	p.WallSecs = p.Wall.Seconds()
	return p, nil
}

func setupStreams(ctx context.Context, js jetstream.JetStream, stream, subject, dlqStream, dlqSubject string) error {
	for _, s := range []jetstream.StreamConfig{
		{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage},
		{Name: dlqStream, Subjects: []string{dlqSubject}, Storage: jetstream.FileStorage},
	} {
		_ = js.DeleteStream(ctx, s.Name)
		if _, err := js.CreateStream(ctx, s); err != nil {
			return fmt.Errorf("chaos: create stream %s: %w", s.Name, err)
		}
	}
	_, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durableName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: 100, MaxAckPending: 512,
	})
	if err != nil {
		return fmt.Errorf("chaos: create consumer: %w", err)
	}
	return nil
}

func consumerInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, durableName)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// progress reads the consumer's pending and unacknowledged counts and the
// stream's last sequence (ok false while the broker is away).
func progress(ctx context.Context, js jetstream.JetStream, stream string) (pending, ackPending int, last uint64, ok bool) {
	info, err := consumerInfo(ctx, js, stream)
	if err != nil {
		return 0, 0, 0, false
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(sctx, stream)
	if err != nil {
		return 0, 0, 0, false
	}
	return int(info.NumPending), info.NumAckPending, s.CachedInfo().State.LastSeq, true
}

// produce publishes the plan, keeping at most a window of messages ahead
// of the consumers so the broker restarts hit the producer too. A publish
// that fails is retried until the stream acknowledges it: when the ack is
// the part that was lost, the order is in the stream twice (the producer
// retries the plan adds on purpose come on top). The messages carry the
// order id in Idem-Id and no Nats-Msg-Id: the stream's duplicate window is
// off, as on a broker without one, so every retry reaches the consumers.
func produce(ctx context.Context, url, subject string, plan *Plan, settled *atomic.Int64) error {
	nc, js, err := connectNATS(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	const window = 400
	for i, m := range plan.Msgs {
		for int64(i)-settled.Load() > window {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		msg := nats.NewMsg(subject)
		msg.Data = m.Data
		msg.Header.Set("Content-Type", "application/json")
		if m.ID != "" {
			msg.Header.Set("Idem-Id", m.ID)
		}
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, msg)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
