package sqsidem

import (
	"context"
	"encoding/json"
	"errors"
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

// Client is the part of *sqs.Client a Consumer, Send and Replay use.
type Client interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// Options configure a Consumer. QueueURL and DeadLetterQueueURL are
// required; the zero value of every other field is a sensible default.
// The scope and the key are the guard's (idem.Options.Scope, filled by
// NewGuard, and idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many messages (on a FIFO queue, message groups) are
	// handled at once (broker.Options). Default 1.
	Concurrency int
	// Backoff is a retried message's visibility timeout, rounded up to whole
	// seconds, and a held message's claim pace (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere is
	// held (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the redrive policy's maxReceiveCount (0: Run reads it
	// from the queue): a retry on the delivery whose ApproximateReceiveCount
	// reaches it is dead-lettered by the consumer with idem's headers, not
	// moved by SQS (broker.Options).
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[*types.Message]

	// QueueURL is the queue consumed. A URL ending in ".fifo" is a FIFO
	// queue: its message groups are handled one message at a time, in
	// order (see the package doc).
	QueueURL string
	// DeadLetterQueueURL receives conflicts, permanent failures, messages
	// without a usable key, parked records and messages that failed
	// MaxDeliveries times, with idem's headers. It may be the queue's
	// redrive target (of the same type: FIFO for a FIFO queue).
	DeadLetterQueueURL string
	// VisibilityTimeout is asked for on every receive, and a message is
	// kept invisible that long again every third of it while it is
	// handled or held. Whole seconds, at least one. Default 30s.
	VisibilityTimeout time.Duration
	// WaitTime is each receive's long poll (WaitTimeSeconds), at most 20s.
	// Default 20s.
	WaitTime time.Duration
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*types.Message], error) {
	e := broker.Options[*types.Message]{
		Concurrency:     o.Concurrency,
		Backoff:         o.Backoff,
		MaxHold:         o.MaxHold,
		MaxDeliveries:   o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout,
		Hooks:           o.Hooks,
	}
	err := e.Fill()
	o.Concurrency, o.Backoff, o.MaxHold, o.ShutdownTimeout = e.Concurrency, e.Backoff, e.MaxHold, e.ShutdownTimeout
	return e, err
}

// Defaults of Options.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultWaitTime          = 20 * time.Second
)

// ErrLockLost is broker.ErrLockLost, the cause of a handler's context
// cancelled because SQS refused to extend the message's visibility (it
// ran out and the message was received again, or it was deleted): SQS
// delivers it again, so the handler's work is settled by the record.
var ErrLockLost = broker.ErrLockLost

// Handler is the work a Consumer runs for each message: Handle
// (two-phase) or HandleTx (transactional inbox).
type Handler = broker.Handler[*types.Message]

// Handle runs fn in two-phase mode (idem.Guard.Do); see broker.Handle.
// fn's context is cancelled if the message's visibility is lost (cause
// ErrLockLost). fn must not delete the message: the Consumer does, after
// the record is durable.
func Handle(fn func(ctx context.Context, m *types.Message) ([]byte, error)) Handler {
	return broker.Handle(fn)
}

// HandleTx runs fn inside a transaction of the guard's store with the
// dedup marker (idem.DoTx, the transactional inbox); see broker.HandleTx.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, m *types.Message) ([]byte, error)) Handler {
	return broker.HandleTx(fn)
}

// NewGuard is idem.New with opts.Scope defaulting to the queue's name (the
// last segment of queueURL), which names one consumer identity.
func NewGuard(store idem.Store, queueURL string, opts idem.Options) (*idem.Guard, error) {
	if opts.Scope == "" {
		name := queueURL[strings.LastIndexByte(queueURL, '/')+1:]
		if name == "" {
			return nil, fmt.Errorf("%w: sqsidem: no queue name in %q for the scope", idem.ErrInvalidOptions, queueURL)
		}
		opts.Scope = name
	}
	return idem.New(store, opts)
}

// Consumer runs a Handler for the messages of an SQS queue, on idem's
// consumer engine (broker.Consumer).
type Consumer struct {
	t    *transport
	eng  *broker.Engine[*types.Message]   // h under g, checked once: a FIFO group's processor
	cons *broker.Consumer[*types.Message] // a standard queue's scheduler
	opts Options
}

// NewConsumer returns a consumer of opts.QueueURL running h for each
// message under g (build it with NewGuard). A nil client, guard or
// handler, a missing QueueURL or DeadLetterQueueURL, a dead-letter queue
// that is the queue itself or of the other type, a VisibilityTimeout
// under a second or over 12 hours, a WaitTime over 20s and negative
// options are refused with an error wrapping idem.ErrInvalidOptions.
func NewConsumer(client Client, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	switch {
	case client == nil:
		return nil, fmt.Errorf("%w: sqsidem: nil client", idem.ErrInvalidOptions)
	case opts.QueueURL == "":
		return nil, fmt.Errorf("%w: sqsidem: Options.QueueURL is required", idem.ErrInvalidOptions)
	case opts.DeadLetterQueueURL == "" || opts.DeadLetterQueueURL == opts.QueueURL:
		return nil, fmt.Errorf("%w: sqsidem: Options.DeadLetterQueueURL is required and not the queue itself (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	case isFIFO(opts.QueueURL) != isFIFO(opts.DeadLetterQueueURL):
		return nil, fmt.Errorf("%w: sqsidem: the dead-letter queue of a FIFO queue is a FIFO queue, and of a standard queue a standard one", idem.ErrInvalidOptions)
	case opts.VisibilityTimeout != 0 && (opts.VisibilityTimeout < time.Second || opts.VisibilityTimeout > 12*time.Hour):
		return nil, fmt.Errorf("%w: sqsidem: VisibilityTimeout %v is not between 1s and 12h", idem.ErrInvalidOptions, opts.VisibilityTimeout)
	case opts.WaitTime < 0 || opts.WaitTime > 20*time.Second:
		return nil, fmt.Errorf("%w: sqsidem: WaitTime %v is not between 0 and 20s", idem.ErrInvalidOptions, opts.WaitTime)
	}
	if opts.VisibilityTimeout == 0 {
		opts.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = DefaultWaitTime
	}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	t := &transport{c: client, opts: opts, visibility: int32((opts.VisibilityTimeout + time.Second - 1) / time.Second),
		maxDeliveries: opts.MaxDeliveries}
	eng, err := broker.NewEngine(g, h, eo)
	if err != nil {
		return nil, err
	}
	return &Consumer{t: t, eng: eng, cons: eng.Consumer(t), opts: opts}, nil
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, client Client, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(client, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run receives and handles messages until ctx ends, then shuts down
// gracefully (broker.Consumer.Run: held and unstarted messages are made
// visible again at once; one on its last delivery is handled instead).
// It first reads the queue's redrive policy: Options.MaxDeliveries above
// its maxReceiveCount is refused (SQS would move messages to its
// dead-letter queue before idem's limit, without idem's headers), and
// with MaxDeliveries 0 the delivery at maxReceiveCount is the last.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.readRedrive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	if c.t.fifo() {
		return c.runFIFO(ctx)
	}
	return c.cons.Run(ctx)
}

// Process handles one message received from the consumer's queue (with
// the attributes MessageOf needs: ReceiveInput's) and settles it; Run
// does the same for every message. On a FIFO queue, call it for one
// group's messages one at a time, in order.
func (c *Consumer) Process(ctx context.Context, m *types.Message) broker.Report {
	return c.cons.Process(ctx, m)
}

// ReceiveInput is the ReceiveMessage input the consumer sends: the
// message attributes and the system attributes it reads (the receive
// count, the group, the sequence number), at most n messages (at most
// 10), its VisibilityTimeout and WaitTime.
func (c *Consumer) ReceiveInput(n int) *sqs.ReceiveMessageInput { return c.t.receiveInput(n) }

// readRedrive reads the queue's maxReceiveCount (RedrivePolicy).
func (c *Consumer) readRedrive(ctx context.Context) error {
	out, err := c.t.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(c.opts.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return fmt.Errorf("sqsidem: read the redrive policy of %s: %w", c.opts.QueueURL, err)
	}
	rp, ok := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if !ok || rp == "" {
		return nil
	}
	var p struct {
		Max json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(rp), &p); err != nil {
		return fmt.Errorf("sqsidem: redrive policy %s: %w", rp, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(p.Max), `"`))
	if err != nil || n < 1 {
		return fmt.Errorf("sqsidem: redrive policy %s: no maxReceiveCount", rp)
	}
	switch {
	case c.opts.MaxDeliveries > n:
		return fmt.Errorf("%w: sqsidem: MaxDeliveries %d is above the queue's maxReceiveCount %d: SQS would move messages before idem's limit, without idem's headers", idem.ErrInvalidOptions, c.opts.MaxDeliveries, n)
	case c.opts.MaxDeliveries == 0:
		c.t.maxDeliveries = n
	}
	return nil
}

// isLockLost reports whether err is SQS refusing a receipt handle: a
// handle superseded by a later receive, of a deleted message, or of one
// visible again.
func isLockLost(err error) bool {
	var (
		invalid  *types.ReceiptHandleIsInvalid
		inflight *types.MessageNotInflight
		api      interface{ ErrorCode() string }
	)
	if errors.As(err, &invalid) || errors.As(err, &inflight) {
		return true
	}
	return errors.As(err, &api) && api.ErrorCode() == "InvalidParameterValue" && strings.Contains(err.Error(), "ReceiptHandle")
}
