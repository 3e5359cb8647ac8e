// Package redisidem is an idem.Store on Redis (go-redis/v9), for teams whose
// dedup state lives in Redis. It works with any redis.UniversalClient:
// a single node, a sentinel failover client, a cluster or a ring (its tests
// run on a single node and on a Redis Cluster of three masters with a
// replica each, which they start themselves; see Failover). It implements
// idem.Store, storekit.BatchStore and idem.Inspector.
//
// The package lives in store/redis but is named redisidem, so it can be
// imported next to go-redis (package redis) without an alias:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisidem.New(rdb, redisidem.Options{Prefix: "idem"})
//	if err != nil {
//		return err
//	}
//	g, err := idem.New(store, idem.Options{Scope: "mailer", Lease: 30 * time.Second})
//	if err != nil {
//		return err
//	}
//	res, err := g.Do(ctx, idem.Message{ID: evt.ID, Payload: evt.Data}, func(ctx context.Context) ([]byte, error) {
//		return mail.Send(ctx, idem.DeriveKey(ctx, "send"), evt)
//	})
//
// # Atomicity
//
// Every transition is one atomic step on one key. A claim is one
// SET key fresh NX (no expiry while in progress): when the key is absent it writes
// the fresh in-progress record, with the request's fresh token (the common
// case costs no script at all). When the key exists, the claim script
// decides (a second round trip), and the
// store's next 64 claims add GET to their SET: it then returns the current
// record, and when that record calls for no write (a duplicate, a live
// owner, a stale record the caller will not take over) the answer is read
// from it with storekit.ApplyClaim, so a run of redeliveries costs one round
// trip each. (Without GET a new key's reply is OK rather than a nil, which
// costs go-redis less: see BENCH.md.) Claims that rewrite
// a record (a retake after the lease ended, a reclaim after a release or
// after the retention ended) run a Lua script (EVALSHA, falling back to EVAL
// when Redis has not seen it) that applies the rules of storekit.ApplyClaim
// again, atomically. Complete, Release and Renew are each one script that
// succeeds only while the record is in progress under the caller's fencing
// token, and return idem.ErrLeaseLost otherwise. Lease and retention
// decisions use the time in the request (the Guard's clock), never Redis's
// clock (see Expiry).
//
// The store remembers the exact value of each claim it holds, so Complete,
// Release and Renew usually run as a compare-and-set inside their script
// (stored value == the value this store wrote under its token); any other
// value, from another process or another owner, takes the parsing path.
// The memory is bounded (8192 claims per Store) and is a hint only.
//
// Concurrent Complete, Release and Renew calls on one Store share round
// trips, the way a database shares commits: a call that finds fewer than
// two in flight is sent at once, alone; calls that arrive while two are out
// are sent together, as one pipeline of their scripts, when one returns.
// Each script
// is still atomic on its own key and each caller gets its own reply, so
// this changes no outcome, only how many writes and reads the connection
// makes under load. Claims are never delayed this way. A shared pipeline
// runs under the context of the call that sends it (its values, such as a
// trace span, and none of its cancellation), until the latest deadline of
// the calls in it when they all have one.
//
// Redis 7.0 or later is required (SET with NX and GET together).
//
// # Keys and values
//
// Each record is one string at
//
//	<prefix>:{<scope>:<stored id>}
//
// The braces are a cluster hash tag around the record's whole identity
// (not its scope alone): every command and script touches one key in one
// slot, and the records of one scope spread over all slots and every
// master (TestCluster: 300 keys of one scope fell in 300 slots, about 100
// per master). A batch claim is then one pipeline per master, sent by
// go-redis in parallel, and each claim in it is atomic on its own key; no
// claim needs two keys in one slot. Scope and id are percent-encoded for '%', '{', '}' and ':'
// so that user text can neither break the tag nor blur the scope/id
// boundary. The value is a text header and the record's variable parts:
//
//	1|<state>|<token>|<attempts>|<lease_until>|<expires_at>|<created_at>|<updated_at>|<len fp>|<len scope>|<len id>|<len display id>|<fp><scope><id><display id><result>
//
// with times in unix milliseconds (empty for a zero time), the display id
// only for hashed long ids, and the result (binary) last. One string rather
// than a hash of fields keeps a claim a single SET and each script one GET
// and one SET: a hash layout measured at about a third of the raw SET NX
// rate. redis-cli GET shows the record legibly.
//
// # Expiry
//
// One clock decides: the caller's. The lease is a field of the record
// (lease_until) and so is the retention end (expires_at), both in the
// caller's time, and every claim, completion and sweep compares them with
// the request's Now. Only a settled record (completed, released) expires,
// when expires_at <= Now. An in-progress record never does: while its lease
// is live it is held (Renew also moves expires_at to the new lease end when
// that is later), and once the lease has ended it is stale, however long
// ago, and a claim asks the Stale policy (retake, park, reconcile) instead
// of starting a new lifetime over it; Sweep leaves it for the operator.
//
// So an in-progress record's key has no Redis expiry at all: the claim
// writes it without one and Renew keeps it without one, and a crashed
// run's record stays until the Stale policy or an operator resolves it.
// A settled record's Redis expiry follows the retention end as a duration,
// never as a point in time: Complete and Release set it to expires_at - Now
// of their own request (PX, at least 1 ms), so Redis's clock only counts down how long
// the record has left, which every clock agrees on. A caller whose clock
// is an hour behind or ahead of the Redis server keeps its records for
// exactly the retention measured by its own clock: never deleted early
// (which would let a second consumer acquire a key whose owner is still
// working), never kept an hour longer. Complete sets it to the new
// retention end and Release to what is left of the retention (a key
// written in progress by an older version, with an expiry, loses it at its
// next renewal). Sweep is for records
// whose retention ended by the caller's clock before Redis's countdown ran
// out (it scans the prefix a bounded number of keys per call, under an
// advisory lock); with a fleet whose clocks agree it usually finds nothing.
//
// Consumers of one prefix should agree with each other on the time to
// well within the lease (NTP does): each record's times are the clock of
// the consumer that last wrote it, and another consumer whose clock is a
// lease ahead sees a live owner's lease as ended. Redis's own clock may be
// anything.
//
// # Fencing tokens
//
// A record that is created where no key exists takes the request's fresh
// token (idem.ClaimRequest.NewToken: random in [2^32, 2^52), drawn by
// Prepare); a claim of a key that still exists (released, retaken, expired
// by the caller's clock but still in Redis) takes the stored token + 1.
// So when Redis has removed a record (its expiry, eviction, FLUSHDB, a
// restart without persistence, a failover that lost it) and the key is
// claimed again, the new owner's token is drawn independently of every
// earlier one, and a zombie still holding an old token can neither
// complete, renew nor release over the new owner (the chance of a match is
// about one in 2^52 per pair). Scripts count in Lua doubles, exact below
// 2^53; every number they write is printed as an integer, and a token that
// would reach 2^53 is refused as invalid data rather than rounded.
//
// # Durability
//
// Redis acknowledges a write before it reaches the disk, unless the server
// runs with appendonly yes and appendfsync always. What a restart loses:
//
//   - no persistence (save "" and appendonly no): every record. Every
//     message still inside the broker's redelivery window is processed again.
//     Fencing still holds across the restart: claims after it draw fresh
//     random tokens, so a worker that was mid-handler when Redis restarted
//     (a zombie now) can neither complete nor release over a new owner of
//     its key; its next Renew or Complete gets idem.ErrLeaseLost (the
//     record is gone or another's) and the Guard cancels its handler. Until then it and
//     the new owner may run the handler at the same time: only downstream
//     keys from idem.DeriveKey keep that effect single.
//   - RDB snapshots only: everything written since the last snapshot
//     (minutes).
//   - appendonly yes, appendfsync everysec (the default AOF setting): up to
//     about one second of writes, so completed records of the last second.
//   - appendonly yes, appendfsync always: nothing acknowledged, at the cost
//     of an fsync per write.
//
// Eviction loses records the same way: every settled record has an expiry,
// so the volatile-* maxmemory policies (and the allkeys-* ones) may delete
// records still inside their retention under memory pressure. Run the store's Redis with
// maxmemory-policy noeviction, so that a full Redis fails claims (the
// messages are retried) instead of forgetting what it processed.
//
// A lost completed record means a redelivered duplicate is processed again;
// a lost in-progress record means a second owner may run concurrently with
// the first. For dedup that matters, run appendonly yes with appendfsync
// always (or everysec if a second's duplicates are acceptable), and make
// downstream effects idempotent with keys from idem.DeriveKey, which is the
// backstop for every loss listed here.
//
// # Failover
//
// Replication is asynchronous. A Redis Cluster master (or a Sentinel
// primary) acknowledges a write before its replica has it; when the master
// dies and the replica takes over, whatever the replica had not received is
// gone, whatever the master's appendfsync (its disk is not what serves
// afterwards). For this store that means:
//
//   - a completed record lost this way: the message's redelivery is
//     claimed as new and processed a second time;
//   - a completion lost but not its claim: the record is back in progress
//     under the owner's token, so a redelivery waits for the lease to end
//     (the owner's own retried Complete still lands);
//   - an in-progress record lost: a second consumer acquires the key while
//     the first still runs its handler (two owners).
//
// What the fencing token still guarantees: a record recreated after the
// loss starts at a fresh random token (see Fencing tokens), so the first
// owner, a zombie now, can neither complete, renew nor release over the new
// one (idem.ErrLeaseLost); a record that survived refuses every stale token,
// and a completed one every token. Fencing keeps the store's records
// consistent; it cannot undo the effect a lost record lets run twice, so
// downstream effects need the keys from idem.DeriveKey.
//
// TestClusterFailover measures this on a cluster it starts (three masters
// with a replica each, cluster-node-timeout 2 s, appendonly yes,
// appendfsync always, four workers claiming and completing fresh keys) by
// killing one master with SIGKILL:
//
//	go test -run TestClusterFailover -v ./store/redis/
//	IDEM_FAILOVER_IN_STEP=1 go test -run TestClusterFailover -v ./store/redis/
//
// In eleven runs on a loaded 2-core machine (load average about 20) the
// dead master's slots were served again 2.8 to 5.0 s after the kill (the
// 2 s node timeout, the failure report, the election); until then every
// claim and completion there failed with an error, never an outcome. The
// other masters' slots failed too, 1 to 21 operations a run, nearly all
// with CLUSTERDOWN in the second or so between the master being marked
// failed and its replica taking over: Redis Cluster refuses every slot while
// one is unserved under cluster-require-full-coverage yes (the default).
// The rest (one a run at most) were completions on a live master that
// shared a pipeline with one for the dead master (see Atomicity: concurrent
// completions share round trips) and so waited for it until their
// deadline; the script had run, and the record was found completed.
// With the replica in step (IDEM_FAILOVER_IN_STEP=1, three runs), the kill
// lost 0, 0 and 1 of the completions acknowledged on the dead master's
// slots (about 600, 140 and 80): the one was the last write before the
// kill, whose claim had reached the replica and its completion had not, so
// it came back in progress under its owner's token.
// In the eight runs where the test made the replica lag (it stops the
// replica's process and fills the replication stream for half a second or
// more before the kill, as a slow disk or a congested link would), every
// write the master acknowledged once the stream was full was lost: 31 to
// 47 worker completions a run plus all 20 probe records, each then claimed
// again under a new token with its zombie refused (once, a completion was
// lost but not its claim: back in progress under the owner's token); no
// record of the other masters was lost. So the loss is bounded by the
// replica's lag, not by a time. WAIT numreplicas after a write would bound
// it (the store does not send WAIT: it must follow the write on the same
// connection, and a cluster client sends a keyless command to a node of its
// own choosing), and still not close it, since a replica may acknowledge
// and then die too.
//
// After a failover the store works again once the cluster does, with no
// restart: on a cluster client each failure asks go-redis for a fresh slot
// map (see Errors). Lua scripts the new master has not seen are sent again
// with their source (NOSCRIPT).
//
// # Errors
//
// A Redis failure (connection refused, timeout, failover, OOM, LOADING,
// READONLY, BUSY, a cluster redirection) is returned as an error that wraps
// go-redis's, never as an outcome: the Guard reports it as a retryable
// *idem.StoreError and nothing is acked or reported acquired. go-redis
// retries some network errors itself; if a claim ran but its reply was
// lost, the retry finds the caller's own record in progress and the message
// is retried after the lease ends.
//
// On a *redis.ClusterClient, every failure that is not the data's also asks
// the client to reload its slot map (ReloadState: asynchronous, at most one
// reload per 200 ms). go-redis reloads it by itself only on a MOVED or
// READONLY reply and every ClusterStateReloadInterval (60 s by default),
// not when a master stops answering, so without this a store kept sending a
// dead master's slots to its address for up to a minute after the replica
// had taken over (55 s in TestClusterFailover before the change).
//
// Errors caused by the data are an *idem.InvalidDataError instead
// (errors.Is(err, idem.ErrInvalidData)): permanent, so the message is
// dead-lettered rather than redelivered for ever. They are: a value at the
// record's key that is not a record (another type, or a string in another
// format: the scripts refuse to overwrite it), a token that would reach
// 2^53, times beyond about 285,000 years from 1970 (unix milliseconds past
// 2^53), a Lua runtime error in a script, and a number Redis refuses; and,
// from storekit's Prepare functions, a request without its times. Any fingerprint bytes
// are accepted (Prepare stores non-text ones as "sha256:<hex>").
//
// # Inspection and sweeping cost
//
// Redis keeps no secondary index here, so List and Stats SCAN every record
// under the prefix (each master of a cluster) and read them in pipelines:
// linear in the store's size, meant for operators, not request paths.
//
// # Performance
//
// A claim of a new key is one SET, like the cheapest possible dedup; a
// claim and its completion are two commands (the handler runs between
// them), the completion sharing its round trip with concurrent ones. At 16
// workers on a 2-core machine shared with the Redis server, claim+complete
// measured 0.46-0.55 (median 0.48) of the rate of a raw SET NX loop while
// other jobs loaded the machine, and 0.37-0.38 on the quiet machine, where
// the client's CPU per command decides (a script-fenced design cannot pass
// 0.50 there); pipelined batch claims 0.56-0.79 of raw pipelined SET NX.
// BENCH.md in this directory has the figures and the command.
package redisidem
