package sqsidem

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// transport is the engine's view of a queue: it receives, deletes,
// changes visibility and dead-letters; the flow is the engine's.
type transport struct {
	c             Client
	opts          Options
	visibility    int32 // seconds
	maxDeliveries int   // the redrive policy's maxReceiveCount, or MaxDeliveries; 0: none
}

var (
	_ broker.Transport[*types.Message]  = (*transport)(nil)
	_ broker.KeepAliver[*types.Message] = (*transport)(nil)
	_ broker.Returner[*types.Message]   = (*transport)(nil)
	_ broker.Delayer                    = (*transport)(nil)
)

func isFIFO(queueURL string) bool { return strings.HasSuffix(queueURL, ".fifo") }

func (t *transport) fifo() bool { return isFIFO(t.opts.QueueURL) }

func (t *transport) receiveInput(n int) *sqs.ReceiveMessageInput {
	return &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String(t.opts.QueueURL),
		MaxNumberOfMessages:   int32(min(max(n, 1), 10)),
		VisibilityTimeout:     t.visibility,
		WaitTimeSeconds:       int32(t.opts.WaitTime / time.Second),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameMessageGroupId,
			types.MessageSystemAttributeNameSequenceNumber,
		},
	}
}

// Receive long-polls for at most n messages (at most 10, SQS's limit).
func (t *transport) Receive(ctx context.Context, n int) ([]*types.Message, error) {
	out, err := t.c.ReceiveMessage(ctx, t.receiveInput(n))
	if err != nil {
		return nil, fmt.Errorf("sqsidem: receive from %s: %w", t.opts.QueueURL, err)
	}
	msgs := make([]*types.Message, len(out.Messages))
	for i := range out.Messages {
		msgs[i] = &out.Messages[i]
	}
	return msgs, nil
}

func (t *transport) Message(m *types.Message) idem.Message { return MessageOf(m) }

// receiveCount is m's ApproximateReceiveCount (1 when missing).
func receiveCount(m *types.Message) int {
	n, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return max(n, 1)
}

// Delivery is the message's ApproximateReceiveCount; the last is the one
// at the redrive policy's maxReceiveCount, which SQS moves to the
// dead-letter queue, without idem's headers, when it becomes visible
// again.
func (t *transport) Delivery(m *types.Message) broker.Delivery {
	n := receiveCount(m)
	return broker.Delivery{Attempt: n, Last: t.maxDeliveries > 0 && n >= t.maxDeliveries}
}

// Ack deletes the message. A receipt handle superseded by a later receive
// deletes nothing (SQS answers success): the message comes back and its
// record makes it a duplicate.
func (t *transport) Ack(ctx context.Context, m *types.Message) error {
	_, err := t.c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(t.opts.QueueURL), ReceiptHandle: m.ReceiptHandle})
	if err != nil {
		return fmt.Errorf("sqsidem: delete: %w", err)
	}
	return nil
}

// visible sets m's visibility timeout to d from now, rounded up to whole
// seconds; ErrLockLost when SQS no longer knows the receipt handle as the
// message's current one.
func (t *transport) visible(ctx context.Context, m *types.Message, d time.Duration) error {
	secs := int32(min((max(d, 0)+time.Second-1)/time.Second, 12*3600))
	_, err := t.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(t.opts.QueueURL),
		ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: secs})
	switch {
	case err == nil:
		return nil
	case isLockLost(err):
		return fmt.Errorf("sqsidem: change visibility: %w: %w", broker.ErrLockLost, err)
	}
	return fmt.Errorf("sqsidem: change visibility: %w", err)
}

// Retry makes the message visible again after delay (whole seconds): the
// delay costs one receive, counted in ApproximateReceiveCount.
func (t *transport) Retry(ctx context.Context, m *types.Message, delay time.Duration) error {
	return t.visible(ctx, m, delay)
}

// RetryDelays reports true: a visibility timeout delays the redelivery
// (to the second, at most 12 hours after the receive).
func (t *transport) RetryDelays() bool { return true }

// Return makes the message visible again at once.
func (t *transport) Return(ctx context.Context, m *types.Message) error { return t.visible(ctx, m, 0) }

// KeepAlive makes the message invisible for VisibilityTimeout from now.
func (t *transport) KeepAlive(ctx context.Context, m *types.Message) error {
	return t.visible(ctx, m, time.Duration(t.visibility)*time.Second)
}

// KeepAliveEvery is a third of VisibilityTimeout.
func (t *transport) KeepAliveEvery(*types.Message) time.Duration {
	return time.Duration(t.visibility) * time.Second / 3
}

// DeadLetter sends the message, its body and attributes with idem's
// headers and its position, to the dead-letter queue, and deletes the
// original. It first extends the original's visibility, so that a
// message whose receipt handle SQS no longer honours (received again
// elsewhere) is not dead-lettered twice (ErrLockLost). On a FIFO queue
// the dead letter keeps the original's group, and its deduplication id
// is the original's MessageId: a dead letter sent again after a failed
// delete, within SQS's five minutes, is dropped.
func (t *transport) DeadLetter(ctx context.Context, m *types.Message, dl broker.DeadLetter) error {
	if err := t.KeepAlive(ctx, m); err != nil {
		return err
	}
	attrs, err := deadLetterAttributes(t.opts.QueueURL, m, dl)
	if err != nil {
		return fmt.Errorf("sqsidem: dead letter: %w", err)
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(t.opts.DeadLetterQueueURL), MessageBody: m.Body, MessageAttributes: attrs}
	if t.fifo() {
		in.MessageGroupId = aws.String(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)])
		in.MessageDeduplicationId = m.MessageId
	}
	if _, err := t.c.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sqsidem: dead letter to %s: %w", t.opts.DeadLetterQueueURL, err)
	}
	return t.Ack(ctx, m)
}
