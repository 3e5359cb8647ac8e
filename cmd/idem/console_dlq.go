package main

import (
	"context"

	"github.com/idemgo/idem/cmd/idem/internal/dlq"
	"github.com/idemgo/idem/console"
)

// consoleQueue gives the console a broker's dead letters: the console
// imports no broker, so 'idem console --broker URL' hands it the queue
// 'idem dlq' opens, through this adapter.
type consoleQueue struct{ q dlq.Queue }

var _ console.DeadLetters = consoleQueue{}

func (c consoleQueue) Name() string { return c.q.Name() }

func (c consoleQueue) List(ctx context.Context, limit int) ([]console.BrokerDeadLetter, error) {
	dls, err := c.q.List(ctx, limit)
	out := make([]console.BrokerDeadLetter, len(dls))
	for i, dl := range dls {
		out[i] = toConsole(dl)
	}
	return out, err
}

func (c consoleQueue) Replay(ctx context.Context, ids []string, done func(console.BrokerDeadLetter, error)) error {
	return c.q.Replay(ctx, ids, func(dl dlq.DeadLetter, err error) { done(toConsole(dl), err) })
}

// toConsole converts one dead letter. The two types have the same fields,
// so a field added to one and not the other stops the build here.
func toConsole(dl dlq.DeadLetter) console.BrokerDeadLetter { return console.BrokerDeadLetter(dl) }
