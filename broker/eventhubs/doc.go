// Package eventhubs makes Azure Event Hubs consumers idempotent, on the
// Azure SDK's azeventhubs (v2) Processor and idem's consumer engine.
//
// An azeventhubs.Processor balances a hub's partitions across instances
// through a CheckpointStore and resumes each from its checkpoint: at
// least once twice over (a crash between the effect and the checkpoint
// replays the batch; an ownership that moves mid-batch replays it on
// another instance), and producers re-send too. A Consumer runs each
// event under an idem.Guard keyed by the event's own key, never by its
// sequence number or offset (a re-send gets new ones):
//
//	g, _ := eventhubs.NewGuard(store, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{})
//	p, _ := azeventhubs.NewProcessor(consumerClient, checkpointStore, nil)
//	err := eventhubs.Consume(ctx, p, g, eventhubs.Handle(charge), eventhubs.Options{
//		DeadLetter: dlqProducer, EventHub: "orders",
//	})
//
// The key is the guard's key function over MessageOf: the Idem-Id
// property (HeaderID, which Send sets), else the event's MessageID; or
// idem.CloudEventsKey over the CloudEvents AMQP binding's cloudEvents:*
// properties. azeventhubs gives an event it batches without a MessageID
// a random one, so a producer that sets none re-sends under a new key:
// set MessageID (Send refuses an event without one) or Idem-Id. Both
// modes run: Handle (two-phase record, with a lease) and
// HandleTx (the transactional inbox, the marker in the business
// transaction).
//
// Each owned partition is read in order by one goroutine, as Kafka's
// partitions are: an event that fails, or whose key is in progress
// elsewhere, holds its partition until it is done, and the checkpoint
// moves after each batch to the last event done. Event Hubs has no
// per-event settle, no delivery count and no dead-letter queue: a
// conflict, a permanent error and an event that failed MaxDeliveries
// times go to the event hub the user names (Options.DeadLetter) with
// idem's properties and the original hub, partition, sequence number,
// offset and enqueued time (DeadLetter); DeadLetterOf reads one and
// Replay sends its original back.
//
// HandleCheckpoint is a third mode: the partition's checkpoint is written
// in the transaction of the event's effects and its key's marker, through
// a CheckpointStore in the business database
// (broker/eventhubs/checkpointstore), as broker/kafka's HandleCheckpoint
// does with Kafka positions.
//
// The guard's scope defaults to the hub and the consumer group (Scope),
// so two consumer groups of one hub never block each other.
//
// Package eventhubstest is an in-process Event Hubs the unmodified
// azeventhubs client runs against, for tests.
package eventhubs
