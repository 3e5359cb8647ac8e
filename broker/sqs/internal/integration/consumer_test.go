package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/broker/sqs/sqstest"
	"github.com/idemgo/idem/store/memory"
)

// queuePair is a queue and its dead-letter queue on a server of its own.
type queuePair struct {
	client   *sqs.Client
	url, dlq string
}

func newQueuePair(t *testing.T, name string, maxReceives int) queuePair {
	t.Helper()
	srv := newServer(t)
	c := newClient(srv, nil)
	ctx := context.Background()
	attrs := map[string]string{}
	suffix := ""
	if len(name) > 5 && name[len(name)-5:] == ".fifo" {
		name, suffix = name[:len(name)-5], ".fifo"
		attrs["FifoQueue"] = "true"
	}
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq" + suffix), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	if maxReceives > 0 {
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:%s:%s:%s-dlq%s","maxReceiveCount":%d}`, sqstest.Region, sqstest.Account, name, suffix, maxReceives)
	}
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + suffix), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return queuePair{client: c, url: *q.QueueUrl, dlq: *dlq.QueueUrl}
}

func (p queuePair) run(t *testing.T, h sqsidem.Handler, opts sqsidem.Options) (stop func() error) {
	t.Helper()
	g, err := sqsidem.NewGuard(memory.New(), p.url, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.QueueURL, opts.DeadLetterQueueURL, opts.WaitTime = p.url, p.dlq, time.Second
	c, err := sqsidem.NewConsumer(p.client, g, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { stop() })
	return stop
}

func (p queuePair) send(t *testing.T, id, body string, extra map[string]types.MessageAttributeValue) {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(p.url), MessageBody: aws.String(body), MessageAttributes: extra}
	if len(p.url) > 5 && p.url[len(p.url)-5:] == ".fifo" {
		in.MessageGroupId = aws.String("g")
	}
	if _, err := sqsidem.Send(context.Background(), p.client, id, in); err != nil {
		t.Fatal(err)
	}
}

// counts are the queue's visible and in-flight messages.
func (p queuePair) counts(t *testing.T, url string) (visible, inFlight string) {
	t.Helper()
	a, err := p.client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	return a.Attributes["ApproximateNumberOfMessages"], a.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

// deadLetter waits for the one dead letter and receives it.
func (p queuePair) deadLetter(t *testing.T) types.Message {
	t.Helper()
	var dl types.Message
	waitUntil(t, "dead-lettered", func() bool {
		out, _ := p.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(p.dlq), MessageAttributeNames: []string{"All"}})
		if out != nil && len(out.Messages) == 1 {
			dl = out.Messages[0]
			return true
		}
		return false
	})
	return dl
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A message whose receipt handle SQS no longer honours (its visibility ran
// out and another consumer received it) cancels its handler with
// ErrLockLost, and nothing is settled: the other receiver still holds it.
func TestVisibilityLostCancelsHandler(t *testing.T) {
	p := newQueuePair(t, "lost", 0)
	other := make(chan types.Message, 1)
	cause := make(chan error, 1)
	p.run(t, sqsidem.Handle(func(ctx context.Context, m *types.Message) ([]byte, error) {
		// Another consumer takes the message over, as after a pause longer
		// than the visibility timeout.
		c := p.client
		if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(p.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			return nil, err
		}
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(p.url), VisibilityTimeout: 60})
		if err != nil || len(out.Messages) != 1 {
			return nil, fmt.Errorf("the other receive: %v, %d messages", err, len(out.Messages))
		}
		other <- out.Messages[0]
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-time.After(20 * time.Second):
			cause <- errors.New("the handler's context was never cancelled")
		}
		return nil, ctx.Err()
	}), sqsidem.Options{VisibilityTimeout: 3 * time.Second})
	p.send(t, "order-1", "x", nil)
	m := <-other
	if err := <-cause; !errors.Is(err, sqsidem.ErrLockLost) {
		t.Fatalf("handler's context cause %v, want ErrLockLost", err)
	}
	// Nothing settled: the other receiver's handle is the message's, in flight.
	if _, err := p.client.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(p.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 60}); err != nil {
		t.Fatalf("the other receiver lost the message: %v", err)
	}
	if v, f := p.counts(t, p.dlq); v != "0" || f != "0" {
		t.Fatalf("dead-letter queue holds %s+%s", v, f)
	}
}

// A retry makes the message visible after the back-off (whole seconds),
// received again with ApproximateReceiveCount + 1; a message handled
// longer than its visibility timeout is kept in flight meanwhile.
func TestRetryAndKeepAlive(t *testing.T) {
	p := newQueuePair(t, "retry", 0)
	var tries atomic.Int32
	counts := make(chan string, 4)
	stamps := make(chan time.Time, 4)
	p.run(t, sqsidem.Handle(func(ctx context.Context, m *types.Message) ([]byte, error) {
		counts <- m.Attributes["ApproximateReceiveCount"]
		stamps <- time.Now()
		if tries.Add(1) == 1 {
			return nil, errors.New("downstream briefly unavailable")
		}
		time.Sleep(2500 * time.Millisecond) // past the 1s visibility timeout
		return nil, nil
	}), sqsidem.Options{VisibilityTimeout: time.Second, Backoff: func(int) time.Duration { return 1500 * time.Millisecond }})
	p.send(t, "order-1", "x", nil)
	waitUntil(t, "emptied", func() bool { v, f := p.counts(t, p.url); return v == "0" && f == "0" && tries.Load() == 2 })
	if c1, c2 := <-counts, <-counts; c1 != "1" || c2 != "2" {
		t.Fatalf("receive counts %s, %s, want 1, 2", c1, c2)
	}
	if d := (<-stamps).Sub(<-stamps); d > -1500*time.Millisecond {
		t.Fatalf("the retry came back after %v, before its back-off of 1.5s (rounded up to 2s)", -d)
	}
	if n := tries.Load(); n != 2 {
		t.Fatalf("handled %d times, want 2: the slow handler's message was received again", n)
	}
}

// MaxDeliveries above the redrive policy's maxReceiveCount is refused by
// Run: SQS would move messages before idem's limit, without its headers.
func TestMaxDeliveriesAboveRedriveRefused(t *testing.T) {
	p := newQueuePair(t, "over", 3)
	g, _ := sqsidem.NewGuard(memory.New(), p.url, idem.Options{})
	c, err := sqsidem.NewConsumer(p.client, g, sqsidem.Handle(func(context.Context, *types.Message) ([]byte, error) { return nil, nil }),
		sqsidem.Options{QueueURL: p.url, DeadLetterQueueURL: p.dlq, MaxDeliveries: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("Run: %v, want ErrInvalidOptions", err)
	}
}

// With MaxDeliveries 0 the consumer reads maxReceiveCount from the queue:
// a message that always fails is dead-lettered by the consumer on that
// receive, with idem's headers, never moved by SQS without them.
func TestRedriveLimitReadFromQueue(t *testing.T) {
	p := newQueuePair(t, "limit", 2)
	p.run(t, sqsidem.Handle(func(context.Context, *types.Message) ([]byte, error) {
		return nil, errors.New("downstream down")
	}), sqsidem.Options{Backoff: func(int) time.Duration { return 0 }})
	p.send(t, "order-1", "x", nil)
	dl := p.deadLetter(t)
	im, err := sqsidem.DeadLetterOf(&dl)
	if err != nil {
		t.Fatal(err)
	}
	if im.Header(idem.HeaderReason) != broker.ReasonMaxDeliver || im.Header(sqsidem.HeaderReceiveCount) != "2" || im.ID != "order-1" {
		t.Fatalf("dead letter %v, want max_deliver on receive 2 of order-1", im.Headers)
	}
}

// SQS allows ten attributes a message: a dead letter of a message that
// uses them all packs those that do not fit beside idem's in
// Idem-Dead-Letter, and Replay restores them.
func TestDeadLetterAttributesOverflow(t *testing.T) {
	p := newQueuePair(t, "full", 0)
	attrs := map[string]types.MessageAttributeValue{}
	for i := range 9 { // and Idem-Id: ten
		attrs[fmt.Sprintf("a%d", i)] = stringAttr(fmt.Sprint("v", i))
	}
	var calls atomic.Int32
	p.run(t, sqsidem.Handle(func(context.Context, *types.Message) ([]byte, error) {
		if calls.Add(1) == 1 {
			return nil, idem.Permanent(errors.New("card rejected"))
		}
		return nil, nil
	}), sqsidem.Options{})
	p.send(t, "order-1", "x", attrs)
	dl := p.deadLetter(t)
	if n := len(dl.MessageAttributes); n > 10 {
		t.Fatalf("dead letter with %d attributes", n)
	}
	im, err := sqsidem.DeadLetterOf(&dl)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range attrs {
		if im.Header(k) != *v.StringValue {
			t.Fatalf("dead letter lost attribute %s: %v", k, im.Headers)
		}
	}
	if im.ID != "order-1" || im.Header(idem.HeaderReason) != "permanent" || im.Header(sqsidem.HeaderPosition) == "" {
		t.Fatalf("dead letter %q: %v", im.ID, im.Headers)
	}
	if err := sqsidem.Replay(context.Background(), p.client, &dl); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replay handled", func() bool { return calls.Load() == 2 })
	if err := sqsidem.Replay(context.Background(), p.client, &types.Message{Body: aws.String("x")}); !errors.Is(err, sqsidem.ErrNotDeadLetter) {
		t.Fatalf("Replay of a plain message: %v, want ErrNotDeadLetter", err)
	}
}

// Send on a FIFO queue: a retry of the same content is dropped by SQS,
// an id reused with other content is not.
func TestSendFIFO(t *testing.T) {
	p := newQueuePair(t, "send.fifo", 0)
	p.send(t, "order-1", `{"amount":10}`, nil)
	p.send(t, "order-1", `{"amount":10}`, nil) // the producer's retry
	p.send(t, "order-1", `{"amount":99}`, nil) // a reuse
	if v, _ := p.counts(t, p.url); v != "2" {
		t.Fatalf("%s messages queued, want 2 (the retry dropped, the reuse kept)", v)
	}
	out, err := p.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(p.url), MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Messages {
		if id := sqsidem.MessageOf(&m).ID; id != "order-1" {
			t.Fatalf("MessageOf id %q", id)
		}
	}
	if _, err := sqsidem.Send(context.Background(), p.client, "", &sqs.SendMessageInput{QueueUrl: aws.String(p.url)}); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("Send without an id: %v, want ErrNoKey", err)
	}
}
