// Package redisstore is an idem.Store on Redis (go-redis/v9), for teams whose
// dedup state lives in Redis. It works with any redis.UniversalClient:
// a single node, a sentinel failover client, a cluster or a ring (its tests
// run on a single node and, opt-in, on a three-master cluster). It
// implements idem.Store, idem.BatchStore and idem.Inspector.
//
// The package lives in store/redis but is named redisstore, so it can be
// imported next to go-redis (package redis) without an alias:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(rdb, redisstore.Options{Prefix: "idem"})
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
// SET key fresh NX PX (ExpiresAt - Now): when the key is absent it writes
// the fresh in-progress record, with the request's fresh token (the common
// case costs no script at all). When the key exists, the claim script
// decides (a second round trip), and the
// store's next 64 claims add GET to their SET: it then returns the current
// record, and when that record calls for no write (a duplicate, a live
// owner, a stale record the caller will not take over) the answer is read
// from it with idem.ApplyClaim, so a run of redeliveries costs one round
// trip each. (Without GET a new key's reply is OK rather than a nil, which
// costs go-redis less: see BENCH.md.) Claims that rewrite
// a record (a retake after the lease ended, a reclaim after a release or
// after the retention ended) run a Lua script (EVALSHA, falling back to EVAL
// when Redis has not seen it) that applies the rules of idem.ApplyClaim
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
// The braces are a cluster hash tag around the record's whole identity:
// every command and script touches one key in one slot, and records spread
// over all slots. Scope and id are percent-encoded for '%', '{', '}' and ':'
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
// the request's Now. A record counts as expired when expires_at <= Now,
// except an in-progress record whose lease is live (lease_until > Now),
// which never expires: Renew moves expires_at to the new lease end when
// that is later, so a handler that runs longer than the retention keeps
// its key for as long as it renews.
//
// The key's Redis expiry follows the retention end as a duration, never
// as a point in time: every write sets it to expires_at - Now of its own
// request (PX, at least 1 ms), so Redis's clock only counts down how long
// the record has left, which every clock agrees on. A caller whose clock
// is an hour behind or ahead of the Redis server keeps its records for
// exactly the retention measured by its own clock: never deleted early
// (which would let a second consumer acquire a key whose owner is still
// working), never kept an hour longer. The claim sets it, Complete moves it
// to the new retention end, Renew extends it with the lease, and Release
// sets it again to what is left of the retention. Sweep is for records
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
// Eviction loses records the same way: every record has an expiry, so
// the volatile-* maxmemory policies (and the allkeys-* ones) may delete live
// records under memory pressure. Run the store's Redis with
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
// Replication is asynchronous: a claim acknowledged by a primary that fails
// before replicating it is lost on failover, so a second consumer can claim
// the same key and both run the handler (two owners). The new owner's token
// is a fresh random one, so the first owner's completion is refused rather
// than recorded over it, but both effects may happen. WAIT narrows the
// window but does not close it. Again the downstream keys from
// idem.DeriveKey are what keeps the effect single.
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
// Errors caused by the data are an *idem.InvalidDataError instead
// (errors.Is(err, idem.ErrInvalidData)): permanent, so the message is
// dead-lettered rather than redelivered for ever. They are: a value at the
// record's key that is not a record (another type, or a string in another
// format: the scripts refuse to overwrite it), a token that would reach
// 2^53, times beyond about 285,000 years from 1970 (unix milliseconds past
// 2^53), a Lua runtime error in a script, and a number Redis refuses; and,
// from idem's Prepare, a request without its times. Any fingerprint bytes
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
package redisstore
