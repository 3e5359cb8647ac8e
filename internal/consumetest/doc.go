// Package consumetest holds test helpers shared by the broker integrations'
// tests (broker/nats, broker/amqp, broker/kafka): a transactional inbox
// fake, a counter of business effects, a SQLite charges table, and the checks
// that every order was applied once and that consumers settle and shut down
// as they should. It is imported by tests only.
//
//	store := consumetest.NewTxStore()
//	h := natsidem.HandleTx(func(ctx context.Context, tx *consumetest.Tx, msg jetstream.Msg) ([]byte, error) {
//		tx.Charge(msg.Headers().Get(jetstream.MsgIDHeader))
//		return nil, nil
//	})
//	// ... consume ...
//	consumetest.AppliedOnce(t, "committed", store.CommittedOrders(), unique)
package consumetest
