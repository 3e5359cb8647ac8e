package cosmos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/store/storekit"
)

// DefaultFingerprintField is the property Entities keeps a message's
// fingerprint in when FingerprintField is empty.
const DefaultFingerprintField = "idemFingerprint"

// DefaultVersionField is the property Versioned keeps the version in when
// VersionField is empty.
const DefaultVersionField = "version"

// EntityInbox is the idem.TxStore for entity mode: give it to
// idem.NewInbox, and the handler's Entities.Insert or Versioned.Apply on
// the *Batch it gets is the only record, as entity.Store is for SQL
// tables. Mark writes nothing and acquires (the entity write decides);
// SaveResult records nothing. InTx runs the handler and sends its batch as
// a BatchInbox does, entity writes first: a create that meets the stored
// document (409) makes InTx run the handler again with a batch that reads
// first, where Insert reports the duplicate or the conflict.
//
//	inbox, err := cosmos.NewEntityInbox(orders)
//	g, err := idem.NewInbox(inbox, idem.Options{Scope: "orders"})
//	table := &cosmos.Entities{Container: orders, PartitionKeyPath: "/orderId"}
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
//		return nil, table.Insert(ctx, b, orderID, fingerprint, order)
//	})
//
// It is not an idem.Store: with no record there is no lease or fencing,
// so a two-phase guard over it would deduplicate nothing.
type EntityInbox struct {
	entity.NoRecords[*Batch]
	container *azcosmos.ContainerClient
}

var _ idem.TxStore[*Batch] = (*EntityInbox)(nil)

// NewEntityInbox returns the entity-mode inbox whose batches write to
// container.
func NewEntityInbox(container *azcosmos.ContainerClient) (*EntityInbox, error) {
	if container == nil {
		return nil, fmt.Errorf("%w: cosmos: nil container", idem.ErrInvalidOptions)
	}
	return &EntityInbox{container: container}, nil
}

// InTx implements idem.TxStore, as BatchInbox.InTx.
func (e *EntityInbox) InTx(ctx context.Context, fn func(ctx context.Context, b *Batch) error) error {
	return runBatch(ctx, e.container, fn)
}

// Ping implements storekit.Pinger, as BatchInbox.Ping.
func (e *EntityInbox) Ping(ctx context.Context) error { return ping(ctx, e.container) }

// Entities is a container of business documents keyed by the message that
// created them: the seed's orders, whose id is the order id and whose
// partition key (/orderId) is the order id too, so every copy of an order
// meets in one logical partition and creating the document is the dedup
// check. The message's fingerprint (its request hash) is kept in
// FingerprintField.
type Entities struct {
	// Container holds the documents.
	Container *azcosmos.ContainerClient
	// PartitionKeyPath is the container's partition key path, one
	// top-level property ("/orderId"); Insert sets it to the key.
	PartitionKeyPath string
	// FingerprintField holds the fingerprint of the message that created
	// the document (default DefaultFingerprintField).
	FingerprintField string
	// Scope is used in the errors' keys (logs and dead letters); default
	// the scope of the key in ctx (idem.DoTx puts it there).
	Scope string
}

func (e *Entities) field() string {
	if e.FingerprintField == "" {
		return DefaultFingerprintField
	}
	return e.FingerprintField
}

// Insert creates doc (a struct or map encoding to a JSON object, or the
// object's JSON as []byte or json.RawMessage) as the document whose id and
// partition key are key, with fingerprint in FingerprintField. When a
// document with this id exists, Insert reads it and compares the stored
// fingerprint: the same is an *idem.DuplicateError (the message was
// processed: ack), another an *idem.ConflictError (the key was reused with
// other content: dead-letter and alert, never dropped). nil means the
// document is in (b nil) or queued (b).
//
// With b nil, Insert creates the document at once: create, 409, read,
// compare, the seed's steps. With b, the batch of an EntityInbox or a
// BatchInbox, the create joins it and is sent with the handler's other
// documents, first, all or none; its 409 at the commit makes the inbox run
// the handler again, and that run's Insert reads first and answers as
// above. The document's id must fit Cosmos DB's rules (at most 255
// characters, none of / \ ? # "), or Insert returns an *idem.KeyError;
// a document that sets id, the partition key property to another value, or
// FingerprintField is an *idem.InvalidDataError.
func (e *Entities) Insert(ctx context.Context, b *Batch, key, fingerprint string, doc any) error {
	if e.Container == nil {
		return fmt.Errorf("%w: cosmos: Entities without a Container", idem.ErrInvalidOptions)
	}
	pkName, err := pkField(e.PartitionKeyPath)
	if err != nil {
		return err
	}
	if err := checkEntityID(key); err != nil {
		return err
	}
	fingerprint = storekit.StoredFingerprint(fingerprint)
	body, err := document("insert", doc, key, map[string]any{pkName: key, e.field(): fingerprint}, e.field())
	if err != nil {
		return err
	}
	pk := azcosmos.NewPartitionKeyString(key)
	if b != nil {
		if err := b.sameContainer(e.Container); err != nil {
			return err
		}
		if err := b.setPartition(key); err != nil {
			return err
		}
		if b.readFirst {
			found, err := e.decide(ctx, key, fingerprint)
			if found || err != nil {
				return err
			}
		}
		b.keyed = append(b.keyed, &keyedOp{id: key, body: func() ([]byte, error) { return body, nil }, deferred: !b.readFirst})
		return nil
	}
	for range maxClaimRounds {
		_, err := e.Container.CreateItem(ctx, pk, body, nil)
		if err == nil {
			return nil
		}
		if statusOf(err) != http.StatusConflict {
			return wrap("insert", err)
		}
		found, err := e.decide(ctx, key, fingerprint)
		if found || err != nil {
			return err
		}
		// Gone since the create (deleted, expired): create again.
	}
	return fmt.Errorf("cosmos: insert of %s: the document came and went %d times; retry", key, maxClaimRounds)
}

// decide reads the document key and compares its fingerprint with fp:
// found false when there is none, else the *idem.DuplicateError or
// *idem.ConflictError to return.
func (e *Entities) decide(ctx context.Context, key, fp string) (bool, error) {
	resp, err := e.Container.ReadItem(ctx, azcosmos.NewPartitionKeyString(key), key, nil)
	switch statusOf(err) {
	case http.StatusNotFound:
		return false, nil
	case 0:
		if err != nil {
			return false, wrap("insert", err)
		}
	default:
		return false, wrap("insert", err)
	}
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(resp.Value, &stored); err != nil {
		return false, fmt.Errorf("cosmos: insert: decoding document %s: %w", key, err)
	}
	var sfp string
	_ = json.Unmarshal(stored[e.field()], &sfp) // absent or not a string: nothing to compare
	if sfp != fp && sfp != "" && fp != "" {
		scope := e.Scope
		if scope == "" {
			k, _ := idem.KeyFromContext(ctx)
			scope = k.Scope
		}
		return true, &idem.ConflictError{Key: idem.Key{Scope: scope, ID: key}, Fingerprint: fp, Record: idem.Record{
			Scope: scope, ID: key, DisplayID: key, State: idem.StateCompleted, Fingerprint: sfp,
		}}
	}
	return true, &idem.DuplicateError{}
}

// Versioned is a container of documents updated by state-transfer
// messages that carry an increasing version ("order 42 is SHIPPED,
// version 7"): a version guard, each write conditional on the ETag of the
// document read. A document's id and partition key are its entity id, as
// for Entities.
type Versioned struct {
	// Container holds the documents.
	Container *azcosmos.ContainerClient
	// PartitionKeyPath is the container's partition key path, one
	// top-level property ("/orderId"); Apply sets it to the id.
	PartitionKeyPath string
	// VersionField holds the version (default DefaultVersionField).
	VersionField string
}

func (v *Versioned) field() string {
	if v.VersionField == "" {
		return DefaultVersionField
	}
	return v.VersionField
}

// maxVersion bounds versions: Cosmos DB keeps numbers as doubles, exact
// to 2^53.
const maxVersion = 1 << 53

// Apply writes doc (as for Entities.Insert) as the state of entity id at
// version: it reads the stored document and creates it when there is
// none, replaces it only if its stored version is older, the replace
// conditional on the ETag read (If-Match), so that a concurrent Apply in
// between makes this one decide again. An older or equal version writes
// nothing and returns an error wrapping idem.ErrSuperseded (ack and skip;
// the guard reports OutcomeSuperseded).
//
// With b nil the write is made at once; with b, the batch of an inbox, it
// joins the batch, and a concurrent write that comes first (409 on the
// create, 412 on the replace) makes the inbox run the handler again.
func (v *Versioned) Apply(ctx context.Context, b *Batch, id string, version int64, doc any) error {
	if v.Container == nil {
		return fmt.Errorf("%w: cosmos: Versioned without a Container", idem.ErrInvalidOptions)
	}
	pkName, err := pkField(v.PartitionKeyPath)
	if err != nil {
		return err
	}
	if err := checkEntityID(id); err != nil {
		return err
	}
	if version > maxVersion || version < -maxVersion {
		return &idem.InvalidDataError{Op: "apply", Err: fmt.Errorf("cosmos: version %d is beyond 2^53, where Cosmos DB's numbers stop being exact", version)}
	}
	body, err := document("apply", doc, id, map[string]any{pkName: id, v.field(): version}, v.field())
	if err != nil {
		return err
	}
	if b != nil {
		if err := b.sameContainer(v.Container); err != nil {
			return err
		}
		if err := b.setPartition(id); err != nil {
			return err
		}
	}
	pk := azcosmos.NewPartitionKeyString(id)
	for range maxClaimRounds {
		resp, err := v.Container.ReadItem(ctx, pk, id, nil)
		var etag *azcore.ETag
		switch statusOf(err) {
		case http.StatusNotFound:
		case 0:
			if err != nil {
				return wrap("apply", err)
			}
			var stored map[string]json.RawMessage
			if err := json.Unmarshal(resp.Value, &stored); err != nil {
				return fmt.Errorf("cosmos: apply: decoding document %s: %w", id, err)
			}
			var cur num
			if raw, ok := stored[v.field()]; ok {
				if err := json.Unmarshal(raw, &cur); err != nil {
					return fmt.Errorf("cosmos: apply: document %s: %s: %w", id, v.field(), err)
				}
				if int64(cur) >= version {
					return fmt.Errorf("%s %s at version %d (stored %d): %w", v.Container.ID(), id, version, cur, idem.ErrSuperseded)
				}
			}
			etag = &resp.ETag
		default:
			return wrap("apply", err)
		}
		if b != nil {
			b.keyed = append(b.keyed, &keyedOp{id: id, body: func() ([]byte, error) { return body, nil }, ifMatch: etag})
			return nil
		}
		if etag == nil {
			_, err = v.Container.CreateItem(ctx, pk, body, nil)
		} else {
			_, err = v.Container.ReplaceItem(ctx, pk, id, body, &azcosmos.ItemOptions{IfMatchEtag: etag})
		}
		switch statusOf(err) {
		case 0:
			return wrap("apply", err)
		case http.StatusConflict, http.StatusPreconditionFailed, http.StatusNotFound:
			continue // another write came first: decide again
		}
		return wrap("apply", err)
	}
	return fmt.Errorf("cosmos: apply of %s: the document changed %d times during one apply; retry", id, maxClaimRounds)
}

// checkEntityID applies Cosmos DB's rules for an item id, and refuses the
// double quote, which azcosmos writes unescaped into a batch's operations.
func checkEntityID(id string) error {
	switch {
	case id == "":
		return &idem.KeyError{Reason: "entity id is empty", Err: idem.ErrNoKey}
	case len(id) > 255:
		return &idem.KeyError{Reason: fmt.Sprintf("entity id of %d bytes (Cosmos DB takes at most 255)", len(id)), Err: idem.ErrInvalidKey}
	case strings.ContainsAny(id, `/\?#"`) || strings.IndexFunc(id, func(r rune) bool { return r < 0x20 }) >= 0:
		return &idem.KeyError{Reason: fmt.Sprintf("entity id %q has one of / \\ ? # \" or a control character, which Cosmos DB ids cannot hold", id), Err: idem.ErrInvalidKey}
	}
	return nil
}

// document is doc's JSON object with id and the properties set set (own,
// one of them, must not be in doc; the others may be, with the same
// value).
func document(op string, doc any, id string, set map[string]any, own string) ([]byte, error) {
	var raw []byte
	switch d := doc.(type) {
	case nil:
		raw = []byte("{}")
	case []byte:
		raw = d
	case json.RawMessage:
		raw = d
	default:
		var err error
		if raw, err = json.Marshal(doc); err != nil {
			return nil, &idem.InvalidDataError{Op: op, Err: err}
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, &idem.InvalidDataError{Op: op, Err: fmt.Errorf("cosmos: the document is not a JSON object: %s", bytes.TrimSpace(raw[:min(len(raw), 40)]))}
	}
	set["id"] = id
	for name, want := range set {
		w, err := json.Marshal(want)
		if err != nil {
			return nil, &idem.InvalidDataError{Op: op, Err: err}
		}
		if got, ok := m[name]; ok {
			if name == own {
				return nil, &idem.InvalidDataError{Op: op, Err: fmt.Errorf("cosmos: the document sets %s, which %s sets itself", name, op)}
			}
			if !jsonEqual(got, w) {
				return nil, &idem.InvalidDataError{Op: op, Err: fmt.Errorf("cosmos: the document's %s is %s, not %s", name, got, w)}
			}
		}
		m[name] = w
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, &idem.InvalidDataError{Op: op, Err: err}
	}
	return out, nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}
