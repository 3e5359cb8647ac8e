package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// newCPEnv is a cluster whose groups take startCP's 1s session, so that
// a crashed member leaves the group within a second and its partitions
// move on.
func newCPEnv(t *testing.T, topic string, parts int32) *env {
	return newEnvWith(t, topic, parts, kfake.GroupMinSessionTimeout(100*time.Millisecond))
}

// eachMode runs f on every backend, fresh for each of the two modes: keys
// marked (the default) and NoKeys.
func eachMode(t *testing.T, f func(t *testing.T, b *cpBackend, cp kafka.Checkpoints)) {
	for _, bc := range cpBackends {
		t.Run(bc.name, func(t *testing.T) { modes(t, bc.open, f) })
	}
}

func modes(t *testing.T, open func(t testing.TB) *cpBackend, f func(t *testing.T, b *cpBackend, cp kafka.Checkpoints)) {
	for _, noKeys := range []bool{false, true} {
		name := "keys"
		if noKeys {
			name = "nokeys"
		}
		t.Run(name, func(t *testing.T) {
			b := open(t)
			cp := b.cp
			cp.NoKeys = noKeys
			f(t, b, cp)
		})
	}
}

// TestCheckpointCrashBeforeOffsetCommit: a consumer applies every record
// (the effects and the positions commit in the database) while no offset
// commit reaches the broker, then crashes. The next consumer of the group
// finds no committed offset at all, resumes from the stored positions, and
// neither applies nor even fetches again what was applied: effects exactly
// once, and no duplicate reported.
func TestCheckpointCrashBeforeOffsetCommit(t *testing.T) {
	eachMode(t, func(t *testing.T, b *cpBackend, cp kafka.Checkpoints) {
		e := newCPEnv(t, "cpcrash", 3)
		g := newCPGuard(t, b.store, e.group)
		first, a := applyUncommitted(t, e, b, cp, g)
		a.kill()
		for p, o := range e.committed() {
			if o >= 0 {
				t.Fatalf("partition %d: offset %d committed at the broker; the test wants none", p, o)
			}
		}
		e.commit.setFail(false)

		second := records(e.topic, "b", 3, 10)
		e.produce(second...)
		var seen settled
		c := startCP(t, e, "", g, b.handler(cp, nil), kafka.Options{Hooks: seen.hooks()})
		waitPositions(t, e, b, e.group)
		e.waitCommitted(t)
		c.stop(nil)

		checkOnce(t, b.effects(t), append(first, second...))
		if got := seen.count(idem.OutcomeProcessed); got != len(second) {
			t.Errorf("the second consumer processed %d records, want the %d new ones", got, len(second))
		}
		if got := seen.count(idem.OutcomeDuplicate); got != 0 {
			t.Errorf("the second consumer met %d applied records: it did not resume from the checkpoints", got)
		}
	})
}

// applyUncommitted produces 10 records per partition and has a consumer
// apply them all (positions at the end offsets) while every offset commit
// fails, which the caller turns off once the consumer is gone.
func applyUncommitted(t *testing.T, e *env, b *cpBackend, cp kafka.Checkpoints, g *idem.Guard) ([]*kgo.Record, *cpConsumer) {
	t.Helper()
	recs := records(e.topic, "a", e.parts, 10)
	e.produce(recs...)
	e.commit.setFail(true)
	a := startCP(t, e, "", g, b.handler(cp, nil), kafka.Options{})
	waitPositions(t, e, b, e.group)
	return recs, a
}

// TestCheckpointRebalances: members join, leave gracefully and crash
// (with offset commits failing at the crash, so the broker's offsets lag
// the database's) while records keep coming: every record is applied
// exactly once, in offset order per partition, and the positions end at
// the end offsets.
func TestCheckpointRebalances(t *testing.T) {
	eachMode(t, func(t *testing.T, b *cpBackend, cp kafka.Checkpoints) {
		e := newCPEnv(t, "cprebalance", 4)
		g := newCPGuard(t, b.store, e.group)
		h := b.handler(cp, nil)
		var all []*kgo.Record
		batch := func(tag string) {
			recs := records(e.topic, tag, 4, 25)
			e.produce(recs...)
			all = append(all, recs...)
		}

		batch("a")
		a := startCP(t, e, "", g, h, kafka.Options{})
		waitEffects(t, b, 25)
		bb := startCP(t, e, "", g, h, kafka.Options{}) // A gives partitions up to B
		batch("b")
		waitEffects(t, b, 125)
		e.commit.setFail(true)
		a.kill() // its last positions never reach the broker
		c := startCP(t, e, "", g, h, kafka.Options{})
		batch("c")
		waitEffects(t, b, 225)
		e.commit.setFail(false)
		bb.stop(nil) // graceful: C takes every partition
		batch("d")
		waitPositions(t, e, b, e.group)
		c.stop(nil)

		checkOnce(t, b.effects(t), all)
	})
}

// TestCheckpointTwoWriters: two consumers in two groups share one scope, so
// both own every partition and both run every record: the worst zombie,
// a former owner that keeps writing. The position's row fences them: each
// record's effects commit in exactly one transaction, the other finds the
// position moved (waiting for the row, or after) and rolls back, reported
// as a duplicate. Effects exactly once and in order.
func TestCheckpointTwoWriters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *cpBackend) {
		e := newCPEnv(t, "cptwo", 2)
		cp := b.cp
		cp.NoKeys = true // the position alone
		const scope = "shared"
		var seenA, seenB settled
		a := startCP(t, e, e.group, newCPGuard(t, b.store, scope), b.handler(cp, nil), kafka.Options{Hooks: seenA.hooks()})
		other := e.group + "-b"
		bb := startCP(t, e, other, newCPGuard(t, b.store, scope), b.handler(cp, nil), kafka.Options{Hooks: seenB.hooks()})
		recs := records(e.topic, "x", 2, 60)
		e.produce(recs...)
		ends := e.endOffsets()
		eventually(t, "both groups committed every offset", func() bool {
			ca, cb := e.groupCommitted(e.group), e.groupCommitted(other)
			for p, end := range ends {
				if ca[p] != end || cb[p] != end {
					return false
				}
			}
			return true
		})
		a.stop(nil)
		bb.stop(nil)
		checkOnce(t, b.effects(t), recs)
		if got := seenA.count(idem.OutcomeProcessed) + seenB.count(idem.OutcomeProcessed); got != len(recs) {
			t.Errorf("%d records processed in all, want %d: each by exactly one writer", got, len(recs))
		}
		t.Logf("processed: A %d, B %d; skipped as applied: A %d, B %d",
			seenA.count(idem.OutcomeProcessed), seenB.count(idem.OutcomeProcessed),
			seenA.count(idem.OutcomeDuplicate), seenB.count(idem.OutcomeDuplicate))
	})
}

// TestCheckpointDeadLetter: a record dead-lettered as the last of its
// partition moves the position past it once its dead letter is
// acknowledged, so the next consumer (which finds no committed offset)
// neither runs it nor dead-letters it again.
func TestCheckpointDeadLetter(t *testing.T) {
	eachMode(t, func(t *testing.T, b *cpBackend, cp kafka.Checkpoints) {
		e := newCPEnv(t, "cpdead", 1)
		recs := records(e.topic, "d", 1, 5)
		e.produce(recs...)
		poison := idOf(recs[4])
		failing := b.handler(cp, func(_ context.Context, rec *kgo.Record) error {
			if idOf(rec) == poison {
				return idem.Permanent(errors.New("bad order"))
			}
			return nil
		})
		e.commit.setFail(true)
		g := newCPGuard(t, b.store, e.group)
		a := startCP(t, e, "", g, failing, kafka.Options{})
		waitPositions(t, e, b, e.group)
		if n := e.dlqEnd(); n != 1 {
			t.Fatalf("%d dead letters, want 1", n)
		}
		a.stop(func(err error) bool { var ce *kafka.CommitError; return errors.As(err, &ce) }) // its final commit fails too
		e.commit.setFail(false)

		more := records(e.topic, "e", 1, 1)
		e.produce(more...)
		var seen settled
		c := startCP(t, e, "", g, failing, kafka.Options{Hooks: seen.hooks()})
		waitPositions(t, e, b, e.group)
		e.waitCommitted(t)
		c.stop(nil)
		if n := e.dlqEnd(); n != 1 {
			t.Errorf("%d dead letters after the restart, want the first one only", n)
		}
		checkOnce(t, b.effects(t), append(recs[:4:4], more...))
		checkDeadLetter(t, e.dlqRecords(1)[0], e.topic, "permanent")
		if got := seen.count(idem.OutcomeProcessed); got != 1 {
			t.Errorf("the second consumer processed %d records, want the new one", got)
		}
	})
}

// TestCheckpointKeys: what each mode covers. A message the producer sent
// twice is two records at two offsets. With keys marked (the default), the
// re-send is a duplicate of the original's key: applied once. With NoKeys
// the position alone cannot tell, and both are applied; redelivery of one
// record is still applied once in both modes (the other tests).
func TestCheckpointKeys(t *testing.T) {
	eachMode(t, func(t *testing.T, b *cpBackend, cp kafka.Checkpoints) {
		e := newCPEnv(t, "cpkeys", 1)
		recs := records(e.topic, "k", 1, 10)
		e.produce(recs...)
		resend := kafka.Record(e.topic, "", idOf(recs[3]), recs[3].Value)
		e.produce(resend)
		var seen settled
		c := startCP(t, e, "", newCPGuard(t, b.store, e.group), b.handler(cp, nil), kafka.Options{Hooks: seen.hooks()})
		waitPositions(t, e, b, e.group)
		c.stop(nil)
		perID := make(map[string]int)
		for _, a := range b.effects(t) {
			perID[a.id]++
		}
		want, dups := 1, 1
		if cp.NoKeys {
			want, dups = 2, 0
		}
		if got := perID[idOf(resend)]; got != want {
			t.Errorf("the re-sent message was applied %d times, want %d", got, want)
		}
		if got := seen.count(idem.OutcomeDuplicate); got != dups {
			t.Errorf("%d duplicates, want %d", got, dups)
		}
		if len(perID) != len(recs) {
			t.Errorf("effects for %d ids, want %d", len(perID), len(recs))
		}
	})
}

// TestCheckpointRecordsWithoutKeys: with NoKeys a record needs no key; with
// keys marked, a record without one is dead-lettered as for HandleTx.
func TestCheckpointRecordsWithoutKeys(t *testing.T) {
	modes(t, openSQLiteBackend, func(t *testing.T, b *cpBackend, cp kafka.Checkpoints) {
		e := newCPEnv(t, "cpnokey", 1)
		e.produce(&kgo.Record{Topic: e.topic, Value: []byte("no key")})
		c := startCP(t, e, "", newCPGuard(t, b.store, e.group), b.handler(cp, nil), kafka.Options{})
		waitPositions(t, e, b, e.group)
		c.stop(nil)
		effects, dls := len(b.effects(t)), e.dlqEnd()
		switch {
		case cp.NoKeys && (effects != 1 || dls != 0):
			t.Errorf("NoKeys: %d effects and %d dead letters, want the record applied", effects, dls)
		case !cp.NoKeys && (effects != 0 || dls != 1):
			t.Errorf("keys: %d effects and %d dead letters, want the record dead-lettered (no_key)", effects, dls)
		}
	})
}

// TestCheckpointValidates: NewConsumer refuses what cannot keep positions;
// Migrate refuses a bad table name and a store without transactions.
func TestCheckpointValidates(t *testing.T) {
	e := newCPEnv(t, "cpvalid", 1)
	b := openSQLiteBackend(t)
	g := newCPGuard(t, b.store, e.group)
	noop := func(context.Context, *sql.Tx, *kgo.Record) error { return nil }
	dlq := kafka.Options{DeadLetterTopic: e.dlq}
	n := 0
	client := func(extra ...kgo.Opt) *kgo.Client {
		n++
		cl, err := kgo.NewClient(append(kafka.ClientOptions(kgo.SeedBrokers(e.c.ListenAddrs()...),
			kgo.ConsumerGroup(fmt.Sprintf("g%d", n)), kgo.ConsumeTopics(e.topic)), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	ownAdjust := kgo.AdjustFetchOffsetsFn(func(_ context.Context, o map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		return o, nil
	})
	tests := []struct {
		name string
		cl   *kgo.Client
		g    *idem.Guard
		h    kafka.Handler
		want []error
	}{
		{"nil function", client(), g, kafka.HandleCheckpoint[*sql.Tx](b.cp, nil), []error{idem.ErrInvalidOptions, broker.ErrNoHandler}},
		{"table name", client(), g, kafka.HandleCheckpoint(kafka.Checkpoints{Table: "x; drop table y"}, noop), []error{idem.ErrInvalidOptions, kafka.ErrInvalidTable}},
		{"three-part name", client(), g, kafka.HandleCheckpoint(kafka.Checkpoints{Table: "a.b.c"}, noop), []error{kafka.ErrInvalidTable}},
		{"reserved name", client(), g, kafka.HandleCheckpoint(kafka.Checkpoints{Table: "sqlite_cp"}, noop), []error{kafka.ErrInvalidTable}},
		{"no SQL for Tx", client(), g, kafka.HandleCheckpoint(b.cp, func(context.Context, int, *kgo.Record) error { return nil }), []error{idem.ErrInvalidOptions}},
		{"store without transactions", client(), newCPGuard(t, memory.New(), e.group), kafka.HandleCheckpoint(b.cp, noop), []error{idem.ErrInvalidOptions, idem.ErrNoTx}},
		{"own AdjustFetchOffsetsFn", client(ownAdjust), g, kafka.HandleCheckpoint(b.cp, noop), []error{kafka.ErrClientConfig}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kafka.NewConsumer(tc.cl, tc.g, tc.h, dlq)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("NewConsumer = %v, want %v", err, w)
				}
			}
		})
	}
	// An AdjustFetchOffsetsFn of the user's own is allowed for the other
	// handlers, and one set before ClientOptions is replaced.
	if _, err := kafka.NewConsumer(client(ownAdjust), g, kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { return nil, nil }), dlq); err != nil {
		t.Errorf("Handle with the user's AdjustFetchOffsetsFn: %v", err)
	}
	before, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers(e.c.ListenAddrs()...), ownAdjust,
		kgo.ConsumerGroup("before"), kgo.ConsumeTopics(e.topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if _, err := kafka.NewConsumer(before, g, kafka.HandleCheckpoint(b.cp, noop), dlq); err != nil {
		t.Errorf("AdjustFetchOffsetsFn set before ClientOptions: %v", err)
	}

	ctx := context.Background()
	if err := (kafka.Checkpoints{Table: "1bad"}).Migrate(ctx, b.store); !errors.Is(err, kafka.ErrInvalidTable) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("Migrate with a bad name: %v", err)
	}
	if err := (kafka.Checkpoints{}).Migrate(ctx, memory.New()); !errors.Is(err, idem.ErrNoTx) {
		t.Errorf("Migrate on the memory store: %v", err)
	}
	if _, err := b.cp.Positions(ctx, memory.New(), e.group, e.topic); !errors.Is(err, idem.ErrNoTx) {
		t.Errorf("Positions on the memory store: %v", err)
	}
	if err := b.cp.Migrate(ctx, b.store); err != nil {
		t.Errorf("Migrate twice: %v", err)
	}
	if pos, err := b.cp.Positions(ctx, b.store, e.group, e.topic); err != nil || len(pos) != 0 {
		t.Errorf("Positions before any record = %v, %v; want none", pos, err)
	}
}

// TestCheckpointResumeBeforeConsumer: kgo joins the group as soon as the
// client exists, so a partition can be assigned before NewConsumer has
// seen the client. Its start waits for the consumer, and comes from the
// stored position, not from the group's (absent) offsets.
func TestCheckpointResumeBeforeConsumer(t *testing.T) {
	b := openSQLiteBackend(t)
	cp := b.cp
	cp.NoKeys = true
	e := newCPEnv(t, "cpearly", 2)
	g := newCPGuard(t, b.store, e.group)
	first, a := applyUncommitted(t, e, b, cp, g)
	a.stop(func(error) bool { return true }) // its final commit fails too
	e.commit.setFail(false)

	cl := e.consumerClient()
	defer cl.Close()
	eventually(t, "the new client assigned every partition", func() bool {
		gs, err := e.adm.DescribeGroups(context.Background(), e.group)
		if err != nil {
			return false
		}
		n := 0
		for _, m := range gs[e.group].Members {
			if ca, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range ca.Topics {
					n += len(tp.Partitions)
				}
			}
		}
		return len(gs[e.group].Members) == 1 && n == int(e.parts)
	})
	second := records(e.topic, "b", 2, 5)
	e.produce(second...)
	var seen settled
	c, err := kafka.NewConsumer(cl, g, b.handler(cp, nil), kafka.Options{Hooks: seen.hooks(), DeadLetterTopic: e.dlq})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitPositions(t, e, b, e.group)
	e.waitCommitted(t)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	checkOnce(t, b.effects(t), append(first, second...))
	if got := seen.count(idem.OutcomeDuplicate); got != 0 {
		t.Errorf("%d applied records met again: the partitions started before the stored positions", got)
	}
}
