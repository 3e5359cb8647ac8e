package mongoidem

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// DefaultCollection is the records collection when Options.Collection is
// empty.
const DefaultCollection = "idem_records"

// ErrInvalidName reports a database or collection name the store does not
// take. It wraps idem.ErrInvalidOptions.
var ErrInvalidName = fmt.Errorf("%w: mongoidem: invalid name", idem.ErrInvalidOptions)

// TTLIndex says whether Migrate creates the TTL index that lets the server
// delete expired records itself (see the package doc, Expiry).
type TTLIndex int

const (
	// TTLIfSupported (the default) creates the TTL index where the server
	// has TTL indexes and goes on without it where it refuses them
	// (FerretDB v1, Cosmos DB's RU-based API on fields other than _ts):
	// records then leave only through Sweep (run an idem.Sweeper).
	// Store.TTL reports which it is after Migrate.
	TTLIfSupported TTLIndex = iota
	// TTLRequired makes Migrate fail where the server refuses the index.
	TTLRequired
	// TTLNone creates no TTL index and writes no ttl_at field: records
	// leave only through Sweep.
	TTLNone
)

// Options configure a Store. The zero value works.
type Options struct {
	// Collection holds the records (default "idem_records"). Letters,
	// digits and _ - . only, at most 100 bytes, not starting with
	// "system.". The sweep lock lives in Collection + ".locks".
	Collection string
	// TTLIndex: TTLIfSupported (default), TTLRequired or TTLNone.
	TTLIndex TTLIndex
}

func (o Options) withDefaults() Options {
	if o.Collection == "" {
		o.Collection = DefaultCollection
	}
	return o
}

// maxCollectionLen bounds the collection name, so that
// "<database>.<collection>.locks" stays within the server's namespace
// limit (255 bytes on MongoDB 4.4+, less on older servers and Cosmos DB).
const maxCollectionLen = 100

// maxDatabaseLen is MongoDB's limit on database names.
const maxDatabaseLen = 63

func (o Options) validate(database string) error {
	if err := checkName("database", database, maxDatabaseLen, false); err != nil {
		return err
	}
	if err := checkName("collection", o.Collection, maxCollectionLen, true); err != nil {
		return err
	}
	if strings.HasPrefix(o.Collection, "system.") {
		return fmt.Errorf("%w: collection %q: names starting with \"system.\" are the server's", ErrInvalidName, o.Collection)
	}
	if o.TTLIndex < TTLIfSupported || o.TTLIndex > TTLNone {
		return fmt.Errorf("%w: mongoidem: unknown TTLIndex %d", idem.ErrInvalidOptions, o.TTLIndex)
	}
	return nil
}

// checkName accepts letters, digits, '_' and '-' (and '.' where dots are
// allowed): a subset of what every MongoDB-API server takes in a name, so
// a name that passes here is never refused there, and none can reach into
// another namespace.
func checkName(kind, name string, max int, dots bool) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	}
	if len(name) > max {
		return fmt.Errorf("%w: %s %q is longer than %d bytes", ErrInvalidName, kind, name, max)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || dots && c == '.'
		if !ok {
			allowed := "letters, digits, _ and -"
			if dots {
				allowed = "letters, digits, _ - and ."
			}
			return fmt.Errorf("%w: %s %q has %q (allowed: %s)", ErrInvalidName, kind, name, c, allowed)
		}
	}
	if dots && (name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..")) {
		return fmt.Errorf("%w: %s %q: a dot may not start or end it, nor follow another", ErrInvalidName, kind, name)
	}
	return nil
}
