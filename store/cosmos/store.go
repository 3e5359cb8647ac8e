package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Store is an idem.Store on an Azure Cosmos DB for NoSQL container. It is
// safe for concurrent use; create one per container with New.
type Store struct {
	client *azcosmos.Client
	coll   *azcosmos.ContainerClient
	opts   Options
}

var (
	_ idem.Store           = (*Store)(nil)
	_ storekit.BatchStore  = (*Store)(nil)
	_ idem.Inspector       = (*Store)(nil)
	_ idem.Retainer        = (*Store)(nil)
	_ idem.ActivityCounter = (*Store)(nil)
)

// New returns a store keeping its records in the container
// opts.Database/opts.Container of client's account. It checks the names
// and does not contact the account; call Migrate once (from any number of
// instances) to create the database and the container.
func New(client *azcosmos.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: cosmos: nil client", idem.ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	coll, err := client.NewContainer(opts.Database, opts.Container)
	if err != nil {
		return nil, fmt.Errorf("%w: cosmos: %v", idem.ErrInvalidOptions, err)
	}
	return &Store{client: client, coll: coll, opts: opts}, nil
}

// Container returns the records' container.
func (s *Store) Container() *azcosmos.ContainerClient { return s.coll }

// maxClaimRounds bounds how often a claim of an existing key reads the
// record again after another writer changed it between the read and the
// conditional replace. Each round means another claim, completion,
// release or renewal of the key landed in between.
const maxClaimRounds = 64

// Claim implements idem.Store. A new key is one create of the fresh
// in-progress record (201). When the key exists (409), the claim reads the
// record, decides with storekit.ApplyClaim, and when that calls for a write
// (expired, released, stale retake) replaces the record only if its ETag
// is still the one read (If-Match): one conditional write, atomic at the
// server. If another writer came in between (412), or the record went
// (404: expired or swept), the claim starts over.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	c, err := s.claim(ctx, req)
	return c, wrap("claim", err)
}

func (s *Store) claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	a := addressOf(req.Key)
	fresh, _ := storekit.ApplyClaim(nil, req)
	fresh.Record = withMS(fresh.Record)
	freshDoc, err := json.Marshal(docOf(fresh.Record, req.Now))
	if err != nil {
		return idem.Claim{}, err
	}
	for range maxClaimRounds {
		_, err := s.coll.CreateItem(ctx, azcosmos.NewPartitionKeyString(a.pk), freshDoc, nil)
		if err == nil {
			return fresh, nil
		}
		if statusOf(err) != http.StatusConflict {
			return idem.Claim{}, err
		}
		cur, etag, err := s.read(ctx, a)
		if statusOf(err) == http.StatusNotFound {
			continue // expired or swept since the create: create again
		}
		if err != nil {
			return idem.Claim{}, err
		}
		rec := cur.record()
		c, write := storekit.ApplyClaim(&rec, req)
		if !write {
			return c, nil
		}
		c.Record = withMS(c.Record)
		body, err := json.Marshal(docOf(c.Record, req.Now))
		if err != nil {
			return idem.Claim{}, err
		}
		_, err = s.coll.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(a.pk), a.id, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		switch statusOf(err) {
		case 0:
			if err != nil {
				return idem.Claim{}, err
			}
			return c, nil
		case http.StatusPreconditionFailed, http.StatusNotFound:
			continue // changed or gone since the read: decide again
		}
		return idem.Claim{}, err
	}
	return idem.Claim{}, fmt.Errorf("the record of %s changed %d times during one claim; retry", req.Key, maxClaimRounds)
}

// read is a point read of the record at a, with its ETag.
func (s *Store) read(ctx context.Context, a address) (recordDoc, azcore.ETag, error) {
	resp, err := s.coll.ReadItem(ctx, azcosmos.NewPartitionKeyString(a.pk), a.id, nil)
	if err != nil {
		return recordDoc{}, "", err
	}
	d, err := decodeDoc(resp.Value)
	return d, resp.ETag, err
}

// held reads the record at a, held in progress under token, or returns
// idem.ErrLeaseLost when there is none.
func (s *Store) held(ctx context.Context, a address, token int64) (recordDoc, error) {
	cur, _, err := s.read(ctx, a)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return cur, idem.ErrLeaseLost
	case err != nil:
		return cur, err
	case cur.State != string(idem.StateInProgress) || int64(cur.Token) != token:
		return cur, idem.ErrLeaseLost
	}
	return cur, nil
}

// ClaimBatch implements storekit.BatchStore: the claims run as concurrent
// creates (Options.BatchConcurrency at a time), each as Claim; results
// are in request order. Every request is checked before any is sent, so a
// bad one (or a repeated key) writes nothing.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	prepared, err := storekit.PrepareClaimBatch(reqs)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]idem.Claim, len(reqs))
	errs := make([]error, len(reqs))
	sem := make(chan struct{}, s.opts.BatchConcurrency)
	done := make(chan struct{})
	for i := range prepared {
		go func() {
			sem <- struct{}{}
			out[i], errs[i] = s.claim(ctx, prepared[i])
			<-sem
			done <- struct{}{}
		}()
	}
	for range prepared {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, wrap("claim batch", err)
		}
	}
	return out, nil
}

// resultOverhead is room for the rest of a record beside its result: the
// ids, display id, fingerprint and scope at their longest, each with its
// JSON escapes, the order key and the fixed-size fields.
const resultOverhead = 20 << 10

// maxItemSize is Cosmos DB's limit on an item.
const maxItemSize = 2 << 20

// ResultLimit is the size in bytes of the largest result the store records:
// an item holds at most 2 MB, the result in base64. Complete refuses a
// larger one with an *idem.InvalidDataError, nothing written; keep the
// guard's MaxResultSize under it.
func (s *Store) ResultLimit(context.Context) (int, error) { return resultLimit, nil }

const resultLimit = (maxItemSize - resultOverhead) / 4 * 3

// heldBy is the condition of a transition of a claim held under token.
func heldBy(token int64) string {
	return fmt.Sprintf("from c where c.token = %d and c.state = '%s'", token, idem.StateInProgress)
}

// fenced patches the record of k held in progress under token, and
// returns idem.ErrLeaseLost when there is no such record (412: another
// token or state; 404: gone).
func (s *Store) fenced(ctx context.Context, k idem.Key, cond string, ops azcosmos.PatchOperations) (bool, error) {
	a := addressOf(k)
	ops.SetCondition(cond)
	_, err := s.coll.PatchItem(ctx, azcosmos.NewPartitionKeyString(a.pk), a.id, ops, nil)
	switch statusOf(err) {
	case 0:
		return err == nil, err
	case http.StatusPreconditionFailed, http.StatusNotFound:
		return false, nil
	}
	return false, err
}

// Complete implements idem.Store: one patch, conditional on the token and
// the state, that sets the state, the result, the retention and the time
// to live the retention leaves.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	if len(req.Result) > resultLimit {
		return &idem.InvalidDataError{Op: "complete", Err: &tooLargeError{Size: len(req.Result), Limit: resultLimit}}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var ops azcosmos.PatchOperations
	ops.AppendSet("/state", idem.StateCompleted)
	ops.AppendSet("/exp", ms(req.ExpiresAt))
	ops.AppendSet("/updated", ms(req.Now))
	ops.AppendSet("/ttl", ttlFor(req.Now, req.ExpiresAt))
	if len(req.Result) > 0 {
		ops.AppendSet("/result", req.Result)
	}
	ok, err := s.fenced(ctx, req.Key, heldBy(req.Token), ops)
	if err != nil {
		return wrap("complete", err)
	}
	if !ok {
		return idem.ErrLeaseLost
	}
	return nil
}

// Release implements idem.Store: state released, lease ended at Now; the
// token, fingerprint and retention stay, and the record, settled, takes the
// time to live its retention leaves. It reads the record (its retention)
// and patches it conditional on the token, the state and that retention.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	req, err := storekit.PrepareRelease(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a := addressOf(req.Key)
	for range maxClaimRounds {
		cur, err := s.held(ctx, a, req.Token)
		if err != nil {
			return wrap("release", err)
		}
		var ops azcosmos.PatchOperations
		ops.AppendSet("/state", idem.StateReleased)
		ops.AppendSet("/lease", ms(req.Now))
		ops.AppendSet("/updated", ms(req.Now))
		ops.AppendSet("/ttl", ttlFor(req.Now, fromMS(cur.Exp)))
		ok, err := s.fenced(ctx, req.Key, fmt.Sprintf("%s and c.exp = %d", heldBy(req.Token), cur.Exp), ops)
		if err != nil || ok {
			return wrap("release", err)
		}
		// Renewed in between (a later retention), or lost: read again.
	}
	return wrap("release", fmt.Errorf("the record of %s changed %d times during one release; retry", req.Key, maxClaimRounds))
}

// Renew implements idem.Store: the lease moves to LeaseUntil, and the
// retention to at least that, in one patch conditional on the token and
// the state (and, when the retention moves, on the retention read). The
// record stays in progress, with no time to live.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	lease := ms(req.LeaseUntil)
	for range maxClaimRounds {
		// Usually the retention is far beyond the lease: one patch.
		var ops azcosmos.PatchOperations
		ops.AppendSet("/lease", lease)
		ops.AppendSet("/updated", ms(req.Now))
		ok, err := s.fenced(ctx, req.Key, fmt.Sprintf("%s and c.exp >= %d", heldBy(req.Token), lease), ops)
		if err != nil || ok {
			return wrap("renew", err)
		}
		ops.AppendSet("/exp", lease)
		ok, err = s.fenced(ctx, req.Key, fmt.Sprintf("%s and c.exp < %d", heldBy(req.Token), lease), ops)
		if err != nil || ok {
			return wrap("renew", err)
		}
		if _, err := s.held(ctx, addressOf(req.Key), req.Token); err != nil {
			return wrap("renew", err)
		}
		// Renewed by the same owner in between: once more.
	}
	return wrap("renew", fmt.Errorf("the record of %s changed %d times during one renewal; retry", req.Key, maxClaimRounds))
}

// Get implements idem.Store: one point read.
func (s *Store) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := k.Validate(); err != nil {
		return idem.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	d, _, err := s.read(ctx, addressOf(k))
	if statusOf(err) == http.StatusNotFound {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	return d.record(), nil
}
