package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/jackc/pgx/v5"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
)

// Pub/Sub: the broker is pstest, the client library's in-process Pub/Sub,
// which the harness hosts on a loopback port; the consumer processes reach
// it over gRPC with the real client (streaming pull), as they would reach
// Pub/Sub. It keeps its topics in memory, so it is never restarted. Each
// pass has a topic with one subscription the consumers share, a
// dead-letter topic the consumers publish to, and a subscription that
// reads it. The subscription has no dead-letter policy: Pub/Sub never
// forwards a message itself, and the consumers' MaxDeliveries is the only
// delivery limit.

// psProject is the harness's Pub/Sub project.
const psProject = "idem-chaos"

// psDeadline is the ack deadline the consumers' clients ask for and
// extend: how long a killed consumer's messages stay with it. Above 5s,
// when the client sends its first extension (see broker/pubsub's doc).
const psDeadline = 7 * time.Second

// psServer is the harness's pstest.
type psServer struct{ srv *pstest.Server }

// StartPubSub starts the harness's in-process Pub/Sub.
func StartPubSub(context.Context) (Server, error) { return &psServer{srv: pstest.NewServer()}, nil }

func (s *psServer) URL() string { return s.srv.Addr }

func (s *psServer) Restart(context.Context) error {
	return errors.New("chaos: pstest keeps its topics in memory: it is never restarted")
}

func (s *psServer) Stop() { s.srv.Close() }

// psClient is a client of the Pub/Sub at addr over a connection of its
// own.
func psClient(ctx context.Context, addr string) (*pubsub.Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return pubsub.NewClient(ctx, psProject, option.WithGRPCConn(conn))
}

func psName(kind, name string) string { return "projects/" + psProject + "/" + kind + "/" + name }

type psBus struct {
	srv                      *psServer
	client                   *pubsub.Client
	pub                      *pubsub.Publisher
	topic, sub, dlq, dlqRead string // full names
	counts                   string
	maxDeliveries            int
}

func openPubSub(ctx context.Context, e *env, maxDeliveries int, naive bool) (bus, error) {
	srv, ok := e.broker.(*psServer)
	if !ok {
		return nil, errors.New("chaos: Pub/Sub runs on the harness's own pstest only")
	}
	prefix := "chaos"
	if naive {
		prefix = "chaos-naive"
	}
	b := &psBus{srv: srv, maxDeliveries: maxDeliveries, topic: psName("topics", prefix+"-orders"), sub: psName("subscriptions", prefix+"-billing"),
		dlq: psName("topics", prefix+"-dlq"), dlqRead: psName("subscriptions", prefix+"-dlq-reader")}
	var err error
	if b.client, err = psClient(ctx, srv.URL()); err != nil {
		return nil, err
	}
	for _, t := range []string{b.topic, b.dlq} {
		if _, err := b.client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: t}); err != nil {
			b.client.Close()
			return nil, fmt.Errorf("chaos: pstest: create topic %s: %w", t, err)
		}
	}
	for s, t := range map[string]string{b.sub: b.topic, b.dlqRead: b.dlq} {
		if _, err := b.client.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: s, Topic: t, AckDeadlineSeconds: 10}); err != nil {
			b.client.Close()
			return nil, fmt.Errorf("chaos: pstest: create subscription %s: %w", s, err)
		}
	}
	b.pub = b.client.Publisher(b.topic)
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *psBus) names(cc *childConfig) {
	cc.Source, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.sub, b.dlq, b.counts, b.maxDeliveries
}

func (b *psBus) close() {
	b.pub.Stop()
	b.client.Close()
}

// progress: the work topic's messages acked (pstest counts them), and
// idle once every one is.
func (b *psBus) progress(context.Context) (int64, bool, bool) {
	var all, acked int64
	for _, m := range b.srv.srv.Messages() {
		if m.Topic != b.topic {
			continue
		}
		all++
		if m.Acks > 0 {
			acked++
		}
	}
	return acked, acked == all, true
}

func (b *psBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce publishes each message with pubsubidem.Publish (the order id in
// Idem-Id; a message without a key plainly) and publishes again each one
// whose publish failed: Pub/Sub deduplicates nothing.
func (b *psBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		rs := make([]*pubsub.PublishResult, len(todo))
		for i, m := range todo {
			msg := &pubsub.Message{Data: m.Data, Attributes: map[string]string{"Content-Type": "application/json"}}
			if m.ID == "" {
				rs[i] = b.pub.Publish(ctx, msg)
			} else {
				rs[i] = pubsubidem.Publish(ctx, b.pub, m.ID, msg)
			}
		}
		var again []planned
		for i, r := range rs {
			if _, err := r.Get(ctx); err != nil {
				again = append(again, todo[i])
			}
		}
		return again
	})
}

// deadLetters pulls the dead-letter reader subscription whole (the pass is
// over: nothing else reads it).
func (b *psBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	var dls []deadLetter
	for {
		resp, err := b.client.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: b.dlqRead, MaxMessages: 1000, ReturnImmediately: true})
		if err != nil {
			return nil, fmt.Errorf("chaos: read the dead letters: %w", err)
		}
		if len(resp.ReceivedMessages) == 0 {
			return dls, nil
		}
		var ids []string
		for _, m := range resp.ReceivedMessages {
			a := m.Message.GetAttributes()
			dls = append(dls, newDeadLetter(a[pubsubidem.HeaderID], a[idem.HeaderReason], m.Message.GetData()))
			ids = append(ids, m.AckId)
		}
		if err := b.client.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: b.dlqRead, AckIds: ids}); err != nil {
			return nil, err
		}
	}
}

// runPubSub is a Pub/Sub consumer process, run by the pubsub package's
// consumer on the client's streaming pull.
func runPubSub(ctx context.Context, cfg childConfig, l *ledger) error {
	client, err := psClient(ctx, cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer client.Close()
	count := newCounter(cfg.Counts)
	sub := client.Subscriber(cfg.Source)
	sub.ReceiveSettings.MinDurationPerAckExtension = psDeadline
	sub.ReceiveSettings.MaxDurationPerAckExtension = psDeadline
	sub.ReceiveSettings.MaxOutstandingMessages = 4 * max(cfg.Concurrency, 1)
	if cfg.Naive {
		return runNaivePubSub(ctx, sub, count, l)
	}
	logf("started")
	g, err := pubsubidem.NewGuard(l.store, sub, l.options())
	if err != nil {
		return err
	}
	dead := client.Publisher(cfg.DLQ)
	defer dead.Stop()
	data := func(m *pubsubidem.Message) []byte { return m.Data }
	h := handlerFor(l, data, broker.Handle[*pubsubidem.Message], broker.HandleTx[pgx.Tx, *pubsubidem.Message], broker.HandleTx[*sql.Tx, *pubsubidem.Message])
	// The client's callbacks are inside the adapter: every delivery the
	// consumer settles is counted.
	c, err := pubsubidem.NewConsumer(sub, g, h, pubsubidem.Options{DeadLetter: dead,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: countSettled(engineHooks[*pubsubidem.Message](l), count),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaivePubSub: receive, charge, commit, ack; a failed charge is nacked
// (Pub/Sub delivers it again at once), an undecodable one acked (dropped).
func runNaivePubSub(ctx context.Context, sub *pubsub.Subscriber, count *counter, l *ledger) error {
	err := sub.Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
		count.add(1)
		switch err := l.naive(ctx, m.Data); {
		case err == nil:
			l.kill.pass(pointSettle)
			m.Ack()
		case errors.Is(err, errPoison):
			m.Ack()
		default:
			time.Sleep(200 * time.Millisecond)
			m.Nack()
		}
	})
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		return err
	}
	return ctx.Err()
}
