package demo

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/broker/sqs/sqstest"
)

// SQS is an in-process Amazon SQS (broker/sqs/sqstest) through the real
// aws-sdk-go-v2 client: a standard queue per consumer group (SQS has no
// fan-out: the producer sends each order to both), with a visibility
// timeout of AckWait, and a dead-letter queue. The producer is
// sqsidem.Send; a crashed consumer's messages come back when their
// visibility timeout ends, and a retry is ChangeMessageVisibility.
var SQS = &Broker{name: "sqs", inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startSQS(ctx, cfg)
}}

type sqsBroker struct {
	srv    *sqstest.Server
	client *sqs.Client
	queues map[string]string // group → queue URL
	dlq    string
}

func startSQS(ctx context.Context, cfg Config) (_ *sqsBroker, err error) {
	b := &sqsBroker{queues: map[string]string{}}
	if b.srv, err = sqstest.NewServer(); err != nil {
		return nil, fmt.Errorf("%w: in-process SQS: %v", ErrBroker, err)
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.client = sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(b.srv.URL()), Credentials: aws.AnonymousCredentials{}})
	vis := strconv.Itoa(max(1, int((cfg.AckWait+time.Second-1)/time.Second)))
	for _, name := range []string{"idem", "naive", "dlq"} {
		out, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders-" + name),
			Attributes: map[string]string{"VisibilityTimeout": vis}})
		if err != nil {
			return nil, fmt.Errorf("%w: create queue orders-%s: %v", ErrBroker, name, err)
		}
		b.queues[name] = aws.ToString(out.QueueUrl)
	}
	b.dlq = b.queues["dlq"]
	return b, nil
}

func (b *sqsBroker) name() string         { return "in-process Amazon SQS (sqstest)" }
func (b *sqsBroker) lostAckCrashes() bool { return false }

func (b *sqsBroker) close() {
	if b.srv != nil {
		b.srv.Close()
	}
}

// publish sends the order to each group's queue with sqsidem.Send: a
// standard queue deduplicates nothing, so producer retries reach the
// consumers.
func (b *sqsBroker) publish(ctx context.Context, m message, seq uint64) error {
	for _, group := range []string{"idem", "naive"} {
		_, err := sqsidem.Send(ctx, b.client, m.Order.ID, &sqs.SendMessageInput{QueueUrl: aws.String(b.queues[group]), MessageBody: aws.String(string(m.payload())),
			MessageAttributes: map[string]types.MessageAttributeValue{
				orderHeader: {DataType: aws.String("String"), StringValue: aws.String(m.Order.ID)},
				seqHeader:   {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatUint(seq, 10))},
			}})
		if err != nil {
			return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
		}
	}
	return nil
}

func (b *sqsBroker) open(_ context.Context, group string) (session, error) {
	return &sqsSession{b: b, queue: b.queues[group]}, nil
}

type sqsSession struct {
	b     *sqsBroker
	queue string
}

// fetch receives what is visible, waiting a second at most; a message
// nobody deletes comes back when its visibility timeout ends.
func (s *sqsSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		out, err := s.b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}})
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				sleep(ctx, 50*time.Millisecond)
			}
			return
		}
		for i := range out.Messages {
			if !yield(&sqsDelivery{s: s, m: out.Messages[i], ctx: ctx}) {
				return
			}
		}
	}
}

func (s *sqsSession) close() {}

type sqsDelivery struct {
	s   *sqsSession
	m   types.Message
	ctx context.Context
}

func (d *sqsDelivery) attr(name string) string {
	return aws.ToString(d.m.MessageAttributes[name].StringValue)
}

func (d *sqsDelivery) seq() uint64  { return seqOf(d.attr(seqHeader)) }
func (d *sqsDelivery) data() []byte { return []byte(aws.ToString(d.m.Body)) }
func (d *sqsDelivery) key() string  { return d.attr(orderHeader) }

func (d *sqsDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := d.s.b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(d.s.queue), ReceiptHandle: d.m.ReceiptHandle})
	return err
}

// retry makes the message visible again after delay (whole seconds, as
// SQS counts them: a shorter delay is none).
func (d *sqsDelivery) retry(delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 2*time.Second)
	defer cancel()
	_, _ = d.s.b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(d.s.queue),
		ReceiptHandle: d.m.ReceiptHandle, VisibilityTimeout: int32(delay / time.Second)})
}

func (d *sqsDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	attrs := map[string]types.MessageAttributeValue{
		"Idem-Reason": {DataType: aws.String("String"), StringValue: aws.String(reason)},
		"Idem-Error":  {DataType: aws.String("String"), StringValue: aws.String(strings.ReplaceAll(cause.Error(), "\n", " "))},
	}
	for k, v := range d.m.MessageAttributes {
		attrs[k] = v
	}
	if _, err := d.s.b.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(d.s.b.dlq), MessageBody: d.m.Body, MessageAttributes: attrs}); err != nil {
		return err
	}
	return d.ack(ctx)
}
