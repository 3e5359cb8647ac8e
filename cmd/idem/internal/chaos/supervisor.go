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

// passTables names one pass's business tables and idem's records table.
func passTables(naive bool) tables {
	if naive {
		return tables{"idem_chaos_naive_charges", "idem_chaos_naive_balances", ""}
	}
	return tables{"idem_chaos_charges", "idem_chaos_balances", "idem_chaos_records"}
}

// runPass runs one pass: it sets up the broker objects and tables, starts
// the consumers and the producer, injects the faults, waits until every
// message is settled and reads the effects.
func runPass(ctx context.Context, cfg Config, e *env, plan *Plan, naive bool) (*Pass, error) {
	start := time.Now()
	p := &Pass{Consumer: "idem"}
	if naive {
		p.Consumer = "naive"
	}
	tbl := passTables(naive)
	b, err := openBus(ctx, cfg, e, naive)
	if err != nil {
		return nil, err
	}
	defer b.close()
	prefix := fmt.Sprintf("idemchaos:%d", time.Now().UnixNano())
	if err := setupStore(ctx, cfg, e, tbl, prefix); err != nil {
		return nil, err
	}
	// The naive consumer's handler fails nothing: it is there for the
	// doubles, and it would retry an order that always fails forever.
	fails := ""
	if !naive {
		fails = filepath.Join(e.logs, "failures")
		if err := writeFailPlan(fails, plan); err != nil {
			return nil, err
		}
	}

	var settled atomic.Int64
	total := int64(len(plan.Msgs))
	var mu sync.Mutex
	slots := make([]*child, cfg.Consumers)
	incarnations := make([]int, cfg.Consumers)
	randomKilled := map[*child]bool{}
	stopping, paused := false, false
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var startSlot func(slot int) error
	startSlot = func(slot int) error {
		mu.Lock()
		defer mu.Unlock()
		if stopping || paused {
			return nil
		}
		cc := childConfig{Role: "consumer", Store: cfg.Store, Broker: cfg.Broker, Naive: naive, StoreURL: e.store.URL(),
			BrokerURL: e.broker.URL(), Tables: tbl, BankURL: e.bankURL,
			Concurrency: cfg.Concurrency, Lease: 2 * time.Second, Prefix: prefix, Fails: fails, Slot: slot}
		b.names(&cc)
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
			case stopping || paused:
			case randomKilled[c]:
				p.RandomKills++
			case c.signaled == syscall.SIGKILL:
				p.PointKills++
			case c.cmd.ProcessState.ExitCode() == 2: // a panic, a bad configuration
				p.Crashes++
			default:
				p.Exits++
			}
			again := !stopping && !paused
			if slots[slot] == c {
				slots[slot] = nil
			}
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
	startAll := func() error {
		for s := range cfg.Consumers {
			if err := startSlot(s); err != nil {
				return err
			}
		}
		return nil
	}
	// stopAll kills every consumer and waits for them; the kills count as
	// nothing.
	stopAll := func(forGood bool) {
		mu.Lock()
		if forGood {
			stopping = true
		}
		paused = true
		for _, c := range slots {
			if c != nil {
				c.kill()
			}
		}
		mu.Unlock()
		wg.Wait()
		mu.Lock()
		paused = false
		mu.Unlock()
	}
	if err := startAll(); err != nil {
		return nil, err
	}
	defer stopAll(true)

	produced := make(chan error, 1)
	go func() { produced <- b.produce(runCtx, plan, &settled) }()

	faults := schedule(cfg)
	producerDone := false
	quiet := 0
	deadline := time.Time{}
	lastReport := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	quietTicks := 3
	if _, ok := b.(drainer); ok {
		quietTicks = 15 // deliveries held by live consumers are invisible: wait longer before the drain
	}
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
		n, idle, ok := b.progress(ctx)
		if ok {
			settled.Store(n)
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
		if producerDone && ok && idle {
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= quietTicks {
			d, ok := b.(drainer)
			if !ok {
				break
			}
			stopAll(false)
			done, err := d.idleWithoutConsumers(ctx)
			if err != nil {
				return nil, err
			}
			if done {
				break
			}
			quiet = 0
			if err := startAll(); err != nil {
				return nil, err
			}
		}
		if producerDone && time.Now().After(deadline) {
			p.Problems = append(p.Problems, fmt.Sprintf("%s: messages still unsettled %s after the producer finished", p.Consumer, cfg.Settle))
			break
		}
	}
	stopAll(true)
	p.Deliveries = b.deliveries(ctx)
	p.Messages = len(plan.Msgs)
	if err := verdict(ctx, cfg, e, b, plan, p, tbl, prefix, fails, naive); err != nil {
		return nil, err
	}
	p.Wall = time.Since(start)
	p.WallSecs = p.Wall.Seconds()
	return p, nil
}
