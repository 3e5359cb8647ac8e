package eventhubs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Consumer runs a Handler for the events of the partitions an
// azeventhubs.Processor gives it, on idem's engine (broker.Processor):
// each owned partition is read in order by one goroutine, an event is
// tried until it is done (acked, a duplicate, or dead-lettered) and the
// partition waits meanwhile, and the partition's checkpoint moves after
// each batch to the last event done. A crash, or an ownership that moves
// to another instance, replays the events since the checkpoint: the
// records skip those already applied.
type Consumer struct {
	p    *azeventhubs.Processor
	eng  *broker.Engine[*azeventhubs.ReceivedEventData]
	opts Options
	sem  chan struct{} // bounds the partitions processed at once
}

// NewConsumer returns a consumer of the partitions p owns, running h for
// each event under g. Build g with NewGuard, whose scope defaults to the
// hub and the consumer group. Run runs p (do not run it yourself).
//
// A nil processor, guard or handler, a HandleTx handler whose Tx the
// guard's store has no transactions for, no DeadLetter producer and
// negative options are refused with an error wrapping
// idem.ErrInvalidOptions.
func NewConsumer(p *azeventhubs.Processor, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: eventhubs: nil processor", idem.ErrInvalidOptions)
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	eng, err := broker.NewEngine(g, h, opts.engine())
	if err != nil {
		return nil, err
	}
	return &Consumer{p: p, eng: eng, opts: opts, sem: make(chan struct{}, opts.Concurrency)}, nil
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, p *azeventhubs.Processor, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(p, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run runs the processor and handles the events of every partition it
// owns until ctx ends; then each partition finishes the event it is on
// (its handler's context cancelled after ShutdownTimeout), checkpoints
// and closes, and Run returns nil. If the processor stops on its own (its
// CheckpointStore failed: it has closed its partition clients), the
// partitions stop the same way and Run returns the processor's error.
func (c *Consumer) Run(ctx context.Context) error {
	pctx, stopProcessor := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProcessor()
	perr := make(chan error, 1)
	processorDone := make(chan struct{})
	go func() {
		defer close(processorDone)
		perr <- c.p.Run(pctx)
	}()
	stop := make(chan struct{}) // ctx ended, or the processor stopped
	go func() {
		select {
		case <-ctx.Done():
		case <-processorDone:
		}
		close(stop)
	}()

	var wg sync.WaitGroup
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	go func() {
		// Graceful first: each partition finishes its event; then, after
		// ShutdownTimeout, the handlers' contexts end.
		select {
		case <-stop:
		case <-hard.Done():
			return
		}
		t := time.NewTimer(c.eng.Options().ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelHard()
		case <-hard.Done():
		}
	}()
	for {
		pc := c.p.NextPartitionClient(ctx)
		if pc == nil {
			break
		}
		part := &partition{c: c, pc: pc}
		wg.Add(1)
		go func() {
			defer wg.Done()
			part.work(hard, stop)
		}()
	}
	wg.Wait()
	stopProcessor()
	err := <-perr
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
