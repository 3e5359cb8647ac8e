package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// What the adapter transports (adapterTransport: Service Bus, Kafka) share:
// the adapter runs the guard and settles, so the demo's handler is the
// ledger's charge and its counts and chaos hang on the adapter's hooks.

// adapterHandler is the ledger's charge as the adapter's handler: two-phase
// for the ledger in memory, in the marker's transaction for the SQL
// ledgers. order decodes a message and says whether the chaos fails its
// handler; handle, sqlTx and pgTx are the adapter's Handle and HandleTx.
func adapterHandler[M, H any](r *runner, order func(M) (o Order, fail bool, err error),
	handle func(func(context.Context, M) ([]byte, error)) H,
	sqlTx func(func(context.Context, *sql.Tx, M) ([]byte, error)) H,
	pgTx func(func(context.Context, pgx.Tx, M) ([]byte, error)) H,
) (H, error) {
	switch l := r.ledger.(type) {
	case *memLedger:
		return handle(func(ctx context.Context, m M) ([]byte, error) {
			o, fail, err := order(m)
			if err != nil {
				return nil, err
			}
			return l.charge(o, fail)
		}), nil
	case *sqlLedger:
		return sqlTx(func(ctx context.Context, tx *sql.Tx, m M) ([]byte, error) {
			o, fail, err := order(m)
			if err != nil {
				return nil, err
			}
			return l.charge(ctx, tx, o, fail)
		}), nil
	case *pgLedger:
		return pgTx(func(ctx context.Context, tx pgx.Tx, m M) ([]byte, error) {
			o, fail, err := order(m)
			if err != nil {
				return nil, err
			}
			return l.charge(ctx, tx, o, fail)
		}), nil
	}
	var none H
	return none, fmt.Errorf("%w: the demo has no adapter handler for a %T ledger", ErrConfig, r.ledger)
}

// afterSettle notes the settled delivery of seq on idem's side from the
// adapter's AfterSettle report. lost says the settle never reached the
// broker (the consumer crashed): the message comes back, and the delivery
// that settles it then counts.
func (r *runner) afterSettle(seq uint64, rep broker.Report, lost bool) {
	s := r.idem
	switch {
	case lost:
	case rep.BrokerErr != nil:
		s.fail(fmt.Errorf("settle with the broker: %w", rep.BrokerErr))
	case rep.Action == idem.ActionAck:
		s.settle(seq, "")
	case rep.Action == idem.ActionDeadLetter:
		s.settle(seq, rep.Reason)
	}
}

// beforeSettle counts a delivery of idem's side from the adapter's
// BeforeSettle report, as handleIdem does for the other brokers, and
// crashes the consumer where the chaos (f, the delivery's fault) says so.
func (r *runner) beforeSettle(rep broker.Report, f fault, crash func()) {
	s := r.idem
	s.deliveries.Add(1)
	switch rep.Action {
	case idem.ActionAck:
		if rep.Result.Outcome == idem.OutcomeDuplicate {
			s.duplicates.Add(1)
		}
		switch f {
		case faultCrash:
			s.crashes.Add(1)
			crash()
		case faultAckLost:
			s.acksLost.Add(1)
			crash()
		}
	case idem.ActionRetry:
		switch {
		case errors.Is(rep.Err, errDownstream):
			s.handlerFailures.Add(1)
		case errors.Is(rep.Err, idem.ErrInProgress):
			s.inProgress.Add(1)
		default:
			s.fail(fmt.Errorf("the store: %w", rep.Err))
		}
	}
}
