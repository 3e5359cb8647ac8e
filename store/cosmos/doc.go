// Package cosmos is an idem.Store on Azure Cosmos DB for NoSQL, through
// the official SDK (azcosmos): the two-phase record of idem's guard, with
// the create of an item as the atomic claim.
//
//	cred, err := azcosmos.NewKeyCredential(key)
//	client, err := azcosmos.NewClientWithKey("https://<account>.documents.azure.com:443/", cred, nil)
//	store, err := cosmos.New(client, cosmos.Options{})      // database "idem", container "idem_records"
//	err = store.Migrate(ctx)                               // once, from any instance
//	g, err := idem.New(store, idem.Options{Scope: "billing"})
//
// It implements idem.Store, storekit.BatchStore, idem.Inspector (the idem
// command's list and stats), idem.Retainer, idem.Superseder and
// idem.ActivityCounter, and passes store/storetest. Tests run it against cosmostest, an in-process
// Cosmos DB the unmodified client talks to (package cosmostest here), or a
// real account or emulator (IDEM_COSMOS_URL, IDEM_COSMOS_KEY).
//
// The guide, with the partitions, expiry and costs:
// https://github.com/idemgo/idem/blob/main/docs/stores/cosmos.md
//
// # Claims and fencing
//
// Claim creates the fresh in-progress record; 201 is the claim won. 409
// means the key is recorded: the claim reads the record with its ETag,
// decides with storekit.ApplyClaim (duplicate, in progress, stale, or a
// write over a released, expired or retaken record), and writes only with
// If-Match on the ETag it read; 412 (another writer came first) or 404
// (the record expired meanwhile) start the claim over. Complete, Release,
// Renew and Retain are patches conditional on the fencing token and the
// state ("from c where c.token = N and c.state = ..."): a zombie whose
// token is stale gets 412, idem.ErrLeaseLost. Tokens follow the Store
// contract: a record created where none is starts at the request's random
// NewToken, each reclaim adds 1.
//
// Every write is conditional at the server, so no read decides a write
// alone: the account's default (Session) consistency is enough, and reads
// that lag another instance's writes only delay an answer. Use a single
// write region (the default): with multi-region writes, Cosmos DB resolves
// concurrent writes to one item by last-writer-wins, and two regions could
// both create a key.
//
// # Entity mode and the transactional batch inbox
//
// The seed's example keeps no record beside the business: its orders
// container is partitioned by /orderId, an order's id is the order id, so
// every copy of an order meets in one logical partition and creating the
// document is the dedup check. Entities.Insert does exactly that: create;
// on 409 read the stored document and compare the request hash kept in it
// (FingerprintField): the same is an *idem.DuplicateError (ack), another
// an *idem.ConflictError (dead-letter with idem's headers, and alert).
// Versioned.Apply guards state-transfer updates by version, each write
// conditional on the ETag read.
//
// Through the guard, both take the *Batch that idem.DoTx hands the
// handler, from an inbox given to idem.NewInbox:
//
//   - EntityInbox: the entity write is the only record (Mark writes
//     nothing), as entity.Store is for SQL tables;
//   - BatchInbox: idem's dedup marker is an item of the business
//     container, in the message's partition, sent in one transactional
//     batch with the handler's documents, all or none (the seed's
//     "lote transaccional").
//
// The handler adds documents to the batch; nothing is sent until it
// returns. The marker and the entity writes go first, sent without reading
// (a create of an existing id fails the whole batch with 409); the inbox
// then runs the handler again with a batch that reads first, where the
// stored marker or document makes the message a duplicate or a conflict.
// So a handler on a Batch must write only through it: a duplicate runs it
// once more before it is skipped. A handler operation the server refuses
// is a *BatchError (a permanent *idem.InvalidDataError when a retry cannot
// change it). Neither inbox is an idem.Store: two-phase work needs Store.
//
// # Errors
//
// A request the store cannot take is an *idem.InvalidDataError (permanent):
// a result over ResultLimit (items are at most 2 MB), a write the server
// refuses as invalid (400) or too large (413). Everything else is returned
// wrapped and retryable: throttling (429) after the client's own retries,
// which wait out x-ms-retry-after-ms, timeouts, an unreachable account, a
// refused key. Options errors wrap idem.ErrInvalidOptions (ErrInvalidName
// for names); a container partitioned by another path is a
// *PartitionKeyError from Migrate and CheckSchema.
package cosmos
