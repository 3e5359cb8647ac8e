// Package cosmostest is an in-process Azure Cosmos DB for NoSQL account
// for tests: an HTTPS server on a loopback port that speaks enough of the
// Cosmos DB REST protocol for the real, unmodified azcosmos client (v1.4)
// to create databases and containers and to write, read and query items
// against it, as kfake is for Kafka. Microsoft's emulator is a container
// or a Windows program; this needs nothing started.
//
//	srv, err := cosmostest.NewServer(cosmostest.Options{})
//	defer srv.Close()
//	client, err := srv.NewClient() // azcosmos.NewClientWithKey(srv.URL(), key, srv.ClientOptions())
//
// Production code runs against Azure unchanged: only the endpoint, the key
// and the transport (ClientOptions trusts the server's certificate) differ.
// The account key is the emulator's (EmulatorKey) unless Options.Key says
// otherwise.
//
// # Fidelity
//
// Each Cosmos DB behaviour it models, and the test (through the real
// azcosmos client) that holds it to it:
//
//	Behaviour                                                        Test
//	the account read the client makes first: one region, readable   every test
//	  and writable at the server's own endpoint, Session consistency
//	databases: create (201, 409), read (200, 404), delete            TestDatabasesAndContainers
//	containers: create with a partition key path and a default time  TestDatabasesAndContainers
//	  to live, read, replace (ttl, indexing policy; a new partition
//	  key is 400), delete
//	master-key authorization: HMAC-SHA256 with the account key of    TestMasterKeyAuthorization,
//	  the verb, resource type, resource link and x-ms-date; another  TestSignatureCoversRequest
//	  key, another resource, a date 15 minutes off: 401
//	items by id within a logical partition (x-ms-documentdb-         TestItemLifecycle
//	  partitionkey): create 201 / 409, read 200 / 404, replace and
//	  delete conditional on If-Match (412), upsert 201 / 200;
//	  Prefer: return=minimal answers writes without the item
//	an item's partition key must match the header; ids of at most    TestItemRefusals
//	  255 characters without / \ ? #; items of at most 2 MB (413)
//	patch: add, set, replace, remove, incr, all or none, under a     TestPatch
//	  condition ("from c where ...", 412 when false); the id and the
//	  partition key cannot be patched
//	transactional batch (at most 100 operations: create, read,       TestTransactionalBatch
//	  replace, upsert, delete, patch) in one logical partition, in
//	  order, all or none: 200 with each operation's status, or 207
//	  with the failing one's (409, 404, 412, 400 for an item of
//	  another partition) and 424 for every other, nothing written
//	session tokens returned and accepted; a consistency level at or  TestSessionAndConsistency
//	  below the account's accepted, a stronger one refused
//	time to live: the container's default (-1: only items with a    TestTimeToLive,
//	  ttl; none: item ttls ignored) and each item's ttl, counted      TestTimeToLiveFromLastWrite
//	  from its last write; an expired item is gone for reads,
//	  queries and writes
//	queries in one partition and across partitions: SELECT *,        TestQueries,
//	  projections, VALUE COUNT(1), TOP; WHERE with parameters,        TestQueryProjectionAndCount
//	  comparisons (values of different types compare undefined),
//	  IN, AND, OR, NOT, IS_DEFINED and IS_NULL-style checks;
//	  ORDER BY (two or more paths need a composite index); OFFSET
//	  LIMIT; pages by x-ms-max-item-count and continuation
//	across partitions, ORDER BY, TOP, OFFSET LIMIT and aggregates    TestQueryRefusals
//	  are refused as the gateway refuses them (400, substatus 1004),
//	  and so is a query without a partition key when the client
//	  turned cross-partition queries off
//	throttling on demand (Throttle): 429 with x-ms-retry-after-ms,   TestThrottle
//	  which the client waits out and retries
//	x-ms-request-charge on every answer, by the model below          TestRequestCharge
//	what it does not model is refused with a 400 naming it           TestUnmodelledRefusedAtOnce,
//	                                                                 TestQueryRefusals
//
// # What it refuses
//
// What it does not model is refused at once with 400 and a message that
// says "cosmostest does not model ...", never served with other semantics:
// listing or querying databases and containers, offers (throughput reads
// and changes), users and permissions, stored procedures, triggers (and
// the trigger headers), user-defined functions, the change feed and read
// feeds, attachments, partition key ranges, hierarchical (MultiHash) and
// absent partition keys, unique key policies, indexing directives,
// If-Match on an upsert (alone or in a batch), patches of array elements
// and move, non-atomic (bulk) batches, AAD and resource tokens, and in
// queries JOIN, GROUP BY, DISTINCT, subqueries, functions other than
// IS_DEFINED, IS_NULL, IS_STRING, IS_NUMBER and IS_BOOL, arithmetic and
// array indexes.
//
// Modelled differently, on purpose: strings compare bytewise (UTF-8); a
// query's continuation is its position in the result, so a page after
// writes to the results may repeat or skip an item (Cosmos DB resumes
// after the last item instead); a query that filters on the partition key
// without sending it is still a cross-partition query; throughput is not
// provisioned nor enforced (Throttle throttles); indexing policies are
// kept and returned, but every path is queryable. State lives in memory
// only.
//
// # Request units
//
// Every answer carries x-ms-request-charge from a model of Azure's
// published costs for small items, not its formula: a point read 1 RU per
// started KB of the item; a create, replace, upsert, patch or delete 5 RU
// per started KB; a query page 2.5 RU plus 1 RU per started KB of what it
// returns; a batch the sum of its operations'; an error 1 RU. Stats totals
// them.
package cosmostest
