package integration_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem/broker/brokertest"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/broker/sqs/sqstest"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on the in-process SQS
// (sqstest) through the real aws-sdk-go-v2 client: a standard queue and
// its dead-letter queue per case, each consumer on an HTTP client of its
// own so that Kill cuts it off alone.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t, false) })
}

// TestConformanceFIFO runs broker/brokertest on a FIFO queue: each
// message's group is its OrderKey (else one of eight, from its id), so
// OrderKept runs, the messages of one key in one group.
func TestConformanceFIFO(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t, true) })
}

// suiteVisibility is the consumers' visibility timeout: short, so that a
// killed consumer's messages come back soon.
const suiteVisibility = 2 * time.Second

func newServer(t testing.TB) *sqstest.Server {
	t.Helper()
	srv, err := sqstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func newClient(srv *sqstest.Server, hc sqs.HTTPClient) *sqs.Client {
	return sqs.New(sqs.Options{Region: sqstest.Region, BaseEndpoint: aws.String(srv.URL()),
		Credentials: aws.AnonymousCredentials{}, HTTPClient: hc})
}

// errKilled is what a killed consumer's calls fail with.
var errKilled = errors.New("test: consumer killed")

// cutClient is an HTTP client that Kill cuts off: calls in flight are
// cancelled and their answers dropped, later ones fail at once.
type cutClient struct {
	hc     *http.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	addrs []string // the local addresses of its connections
}

func newCutClient() *cutClient {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cutClient{ctx: ctx, cancel: cancel}
	var d net.Dialer
	c.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			c.mu.Lock()
			c.addrs = append(c.addrs, conn.LocalAddr().String())
			c.mu.Unlock()
		}
		return conn, err
	}}}
	return c
}

// served waits until the server has finished every request of the
// client (a long poll abandoned at a graceful stop included).
func (c *cutClient) served(srv *sqstest.Server) error {
	c.hc.CloseIdleConnections()
	c.mu.Lock()
	addrs := append([]string(nil), c.addrs...)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Served(ctx, addrs...)
}

func (c *cutClient) Do(r *http.Request) (*http.Response, error) {
	if c.ctx.Err() != nil {
		return nil, errKilled
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(c.ctx, cancel)()
	resp, err := c.hc.Do(r.WithContext(ctx))
	if c.ctx.Err() != nil {
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, errKilled
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends a call's context once its answer is read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func (c *cutClient) kill() {
	c.cancel()
	c.hc.CloseIdleConnections()
}

var queues atomic.Int64

type suiteBroker struct {
	t      *testing.T
	srv    *sqstest.Server
	client *sqs.Client // the publisher's and the dead-letter reader's
	fifo   bool
	name   string
	down   sync.WaitGroup
	dedup  atomic.Int64

	once     sync.Once
	err      error
	url, dlq string

	mu       sync.Mutex
	dls      []brokertest.DeadLetter
	raw      []types.Message
	replayed int
}

func newSuiteBroker(t *testing.T, fifo bool) *suiteBroker {
	srv := newServer(t)
	b := &suiteBroker{t: t, srv: srv, client: newClient(srv, nil), fifo: fifo, name: fmt.Sprintf("q%d", queues.Add(1))}
	t.Cleanup(b.down.Wait)
	return b
}

// ready creates the case's queue and dead-letter queue on first use, with
// the redrive policy's maxReceiveCount the first consumer's MaxDeliveries
// (the way a user sets MaxDeliveries to the queue's), so that SQS moves a
// message on its own at that limit as it would; no redrive policy where
// none is set or a case publishes first.
func (b *suiteBroker) ready(maxDeliveries int) error {
	b.once.Do(func() {
		ctx := context.Background()
		suffix := ""
		attrs := map[string]string{}
		if b.fifo {
			suffix = ".fifo"
			attrs["FifoQueue"] = "true"
		}
		dlq, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(b.name + "-dlq" + suffix), Attributes: attrs})
		if b.err = err; err != nil {
			return
		}
		b.dlq = *dlq.QueueUrl
		if maxDeliveries > 0 {
			arn, err := b.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
			if b.err = err; err != nil {
				return
			}
			attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arn.Attributes["QueueArn"], maxDeliveries)
		}
		q, err := b.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(b.name + suffix), Attributes: attrs})
		if b.err = err; err == nil {
			b.url = *q.QueueUrl
		}
	})
	return b.err
}

// Features: SQS counts receives (ApproximateReceiveCount) toward the
// redrive policy's maxReceiveCount, which the consumer honours; a
// message left in flight comes back after its visibility timeout. A
// standard queue keeps no order; a FIFO queue keeps each group's.
func (b *suiteBroker) Features() brokertest.Features {
	f := brokertest.Features{DeliveryLimit: true, Redelivery: suiteVisibility}
	if b.fifo {
		f.Ordered = true
	} else {
		f.Skip = map[string]string{
			"OrderKept":                   "a standard queue keeps no order (best-effort ordering, competing consumers)",
			"ReplayInsideDuplicateWindow": "a standard queue has no deduplication (only FIFO queues do)",
		}
	}
	return f
}

// PublishDeduplicated sends each message with sqsidem.Send to the FIFO
// queue (Idem-Id the id, MessageDeduplicationId its idem.DedupID), in the
// group Publish gives it: SQS drops a repeat for five minutes.
func (b *suiteBroker) PublishDeduplicated(ctx context.Context, msgs ...brokertest.Message) error {
	if !b.fifo {
		return errors.New("a standard queue has no deduplication")
	}
	if err := b.ready(0); err != nil {
		return err
	}
	for _, m := range msgs {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(b.url), MessageBody: aws.String(string(m.Payload)),
			MessageGroupId: aws.String(groupOf(m)), MessageAttributes: map[string]types.MessageAttributeValue{}}
		for k, v := range m.Headers {
			in.MessageAttributes[k] = stringAttr(v)
		}
		if _, err := sqsidem.Send(ctx, b.client, m.ID, in); err != nil {
			return err
		}
	}
	return nil
}

// groupOf is m's FIFO message group: its OrderKey, else one of eight, from
// its id.
func groupOf(m brokertest.Message) string {
	if m.OrderKey != "" {
		return m.OrderKey
	}
	h := fnv.New32a()
	h.Write([]byte(m.ID))
	return fmt.Sprint("g", h.Sum32()%8)
}

// Publish sends msgs in batches of ten, in order. On a FIFO queue each
// send has a deduplication id of its own: the suite's producer retries
// must reach the consumer.
func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	if err := b.ready(0); err != nil {
		return err
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 10)
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, m := range msgs[:n] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Payload)),
				MessageAttributes: map[string]types.MessageAttributeValue{}}
			if m.ID != "" {
				e.MessageAttributes[sqsidem.HeaderID] = stringAttr(m.ID)
			}
			for k, v := range m.Headers {
				e.MessageAttributes[k] = stringAttr(v)
			}
			if b.fifo {
				e.MessageGroupId = aws.String(groupOf(m))
				e.MessageDeduplicationId = aws.String(strconv.FormatInt(b.dedup.Add(1), 10))
			}
			entries[i] = e
		}
		out, err := b.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(b.url), Entries: entries})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send batch: %s: %s", aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
		}
		msgs = msgs[n:]
	}
	return nil
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// DeadLetters receives what the dead-letter queue holds beyond what was
// read before, and deletes it (a receive whose answer the client lost and
// retried leaves what it took in flight: five seconds, not a case's
// deadline, on a FIFO queue where they block their groups): the consumer's dead letters with
// DeadLetterOf, those SQS moved itself (at maxReceiveCount) as they are.
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	if err := b.ready(0); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		out, err := b.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.dlq), MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}, VisibilityTimeout: 5})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			return append([]brokertest.DeadLetter(nil), b.dls...), nil
		}
		for _, m := range out.Messages {
			im, err := sqsidem.DeadLetterOf(&m)
			if err != nil && !errors.Is(err, sqsidem.ErrNotDeadLetter) {
				return nil, err
			}
			b.dls = append(b.dls, brokertest.DeadLetter{ID: im.ID, Payload: im.Payload, Headers: im.Headers})
			b.raw = append(b.raw, m)
			if _, err := b.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(b.dlq), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return nil, err
			}
		}
	}
}

// Replay sends back, with sqsidem.Replay, every dead letter received and
// not yet replayed.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for ; b.replayed < len(b.raw); b.replayed++ {
		if err := sqsidem.Replay(ctx, b.client, &b.raw[b.replayed]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Start runs a consumer on an HTTP client of its own; Kill cuts the
// client off, leaving its messages in flight until their visibility
// timeout ends.
func (b *suiteBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	if err := b.ready(sc.MaxDeliveries); err != nil {
		return nil, err
	}
	hc := newCutClient()
	backoff := consumetest.Backoff(sc)
	if backoff == nil {
		backoff = func(int) time.Duration { return 50 * time.Millisecond }
	}
	c, err := sqsidem.NewConsumer(newClient(b.srv, hc), sc.Guard, consumetest.SuiteHandler(sc, sqsidem.MessageOf), sqsidem.Options{
		Concurrency: sc.Concurrency, Backoff: backoff, MaxDeliveries: sc.MaxDeliveries,
		ShutdownTimeout: 10 * time.Second, Hooks: consumetest.Hooks(sc.Hooks, sqsidem.MessageOf),
		QueueURL: b.url, DeadLetterQueueURL: b.dlq, VisibilityTimeout: suiteVisibility, WaitTime: time.Second,
	})
	if err != nil {
		return nil, err
	}
	return consumetest.Start(&b.down, c.Run, func() error { return hc.served(b.srv) }, hc.kill), nil
}
