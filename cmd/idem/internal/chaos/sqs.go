package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/broker/sqs/sqstest"
)

// SQS: the broker is sqstest, an in-process SQS the harness hosts on a
// loopback port, which the consumer processes reach over HTTP with the
// real aws-sdk-go-v2 client, as they would reach SQS. It keeps its queues
// in memory, so it is never restarted (a restart would lose every
// message, which SQS never does). Each pass has a standard work queue and
// a dead-letter queue, with no redrive policy: SQS never moves a message
// itself, and the consumers' MaxDeliveries is the only delivery limit.

// sqsVisibility is the work queue's visibility timeout: how long a killed
// consumer's messages stay invisible before another receives them. The
// consumers extend it while they handle a message.
const sqsVisibility = 2 * time.Second

// sqsServer is the harness's sqstest.
type sqsServer struct{ srv *sqstest.Server }

// StartSQS starts the harness's in-process SQS.
func StartSQS(context.Context) (Server, error) {
	srv, err := sqstest.NewServer()
	if err != nil {
		return nil, fmt.Errorf("chaos: sqstest: %w", err)
	}
	return &sqsServer{srv: srv}, nil
}

func (s *sqsServer) URL() string { return s.srv.URL() }

func (s *sqsServer) Restart(context.Context) error {
	return errors.New("chaos: sqstest keeps its queues in memory: it is never restarted")
}

func (s *sqsServer) Stop() { s.srv.Close() }

// sqsClient is a client of the SQS at endpoint.
func sqsClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
}

type sqsBus struct {
	client        *sqs.Client
	queue, dlq    string // URLs
	counts        string
	maxDeliveries int
	sent          atomic.Int64 // messages SQS accepted
}

func openSQS(ctx context.Context, e *env, maxDeliveries int, naive bool) (bus, error) {
	if _, ok := e.broker.(*sqsServer); !ok {
		return nil, errors.New("chaos: SQS runs on the harness's own sqstest only")
	}
	b := &sqsBus{client: sqsClient(e.broker.URL()), maxDeliveries: maxDeliveries}
	prefix := "chaos"
	if naive {
		prefix = "chaos-naive"
	}
	for name, u := range map[string]*string{prefix + "-orders": &b.queue, prefix + "-dlq": &b.dlq} {
		out, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
			Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(int(sqsVisibility / time.Second))}})
		if err != nil {
			return nil, fmt.Errorf("chaos: sqstest: create queue %s: %w", name, err)
		}
		*u = aws.ToString(out.QueueUrl)
	}
	var err error
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *sqsBus) names(cc *childConfig) {
	cc.Source, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.queue, b.dlq, b.counts, b.maxDeliveries
}

func (b *sqsBus) close() {}

// progress: what SQS accepted less what the work queue still holds,
// visible, in flight or delayed.
func (b *sqsBus) progress(ctx context.Context) (int64, bool, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := b.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(b.queue),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return 0, false, false
	}
	var held int64
	for _, v := range out.Attributes {
		n, _ := strconv.ParseInt(v, 10, 64)
		held += n
	}
	return b.sent.Load() - held, held == 0, true
}

func (b *sqsBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// produce sends each message with sqsidem.Send (the order id in Idem-Id;
// a message without a key plainly), and sends again each one whose send
// failed: a standard queue deduplicates nothing, so an order whose reply
// was what was lost is in the queue twice.
func (b *sqsBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		var again []planned
		for _, m := range todo {
			in := &sqs.SendMessageInput{QueueUrl: aws.String(b.queue), MessageBody: aws.String(string(m.Data))}
			var err error
			if m.ID == "" {
				_, err = b.client.SendMessage(ctx, in)
			} else {
				_, err = sqsidem.Send(ctx, b.client, m.ID, in)
			}
			if err != nil {
				again = append(again, m)
				continue
			}
			b.sent.Add(1)
		}
		return again
	})
}

// deadLetters receives the dead-letter queue whole (the pass is over:
// nothing else reads it).
func (b *sqsBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	var dls []deadLetter
	for {
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.dlq), MaxNumberOfMessages: 10,
			VisibilityTimeout: 600, MessageAttributeNames: []string{"All"}})
		if err != nil {
			return nil, fmt.Errorf("chaos: read the dead-letter queue: %w", err)
		}
		if len(out.Messages) == 0 {
			return dls, nil
		}
		for i := range out.Messages {
			m, err := sqsidem.DeadLetterOf(&out.Messages[i])
			if err != nil {
				return nil, fmt.Errorf("chaos: dead letter %s: %w", aws.ToString(out.Messages[i].MessageId), err)
			}
			dls = append(dls, newDeadLetter(m.ID, m.Headers[idem.HeaderReason], m.Payload))
		}
	}
}

// countingSQS counts the messages a consumer process receives: the
// queue's deliveries to it.
type countingSQS struct {
	*sqs.Client
	c *counter
}

func (s countingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.Client.ReceiveMessage(ctx, in, opts...)
	if out != nil {
		s.c.add(uint64(len(out.Messages)))
	}
	return out, err
}

func sqsBody(m *types.Message) []byte { return []byte(aws.ToString(m.Body)) }

// runSQS is an SQS consumer process, run by the sqs package's consumer:
// it receives from the work queue, extends the visibility of what it
// handles, deletes after the commit and dead-letters to the dead-letter
// queue.
func runSQS(ctx context.Context, cfg childConfig, l *ledger) error {
	client := countingSQS{sqsClient(cfg.BrokerURL), newCounter(cfg.Counts)}
	if cfg.Naive {
		return runNaiveSQS(ctx, client, cfg, l)
	}
	logf("started")
	g, err := sqsidem.NewGuard(l.store, cfg.Source, l.options())
	if err != nil {
		return err
	}
	h := handlerFor(l, sqsBody, sqsidem.Handle, sqsidem.HandleTx[pgx.Tx], sqsidem.HandleTx[*sql.Tx])
	c, err := sqsidem.NewConsumer(client, g, h, sqsidem.Options{
		QueueURL: cfg.Source, DeadLetterQueueURL: cfg.DLQ, VisibilityTimeout: sqsVisibility, WaitTime: time.Second,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: engineHooks[*types.Message](l),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveSQS: receive, charge, commit, delete. A failed charge leaves the
// message to come back when its visibility timeout ends; an undecodable
// one is deleted (dropped).
func runNaiveSQS(ctx context.Context, client countingSQS, cfg childConfig, l *ledger) error {
	conc := max(cfg.Concurrency, 1)
	work := make(chan types.Message)
	defer close(work)
	for range conc {
		go func() {
			for m := range work {
				err := l.naive(ctx, sqsBody(&m))
				if err != nil && !errors.Is(err, errPoison) {
					continue
				}
				if err == nil {
					l.kill.pass(pointSettle)
				}
				client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(cfg.Source), ReceiptHandle: m.ReceiptHandle})
			}
		}()
	}
	for ctx.Err() == nil {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(cfg.Source), MaxNumberOfMessages: int32(min(10, 2*conc)), WaitTimeSeconds: 1})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, m := range out.Messages {
			work <- m
		}
	}
	return ctx.Err()
}
