// Package redisidem is an idem.Store on Redis (go-redis/v9), for teams whose
// dedup state lives in Redis. It works with any redis.UniversalClient:
// a single node, a sentinel failover client, a cluster or a ring (its tests
// run on a single node and on a Redis Cluster of three masters with a
// replica each, which they start themselves; see the guide's Failover). It implements
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
// The guide, with the key layout, expiry, durability, failover and sizing:
// https://github.com/idemgo/idem/blob/main/docs/stores/redis.md
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
// clock (see the guide's Expiry).
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
package redisidem
