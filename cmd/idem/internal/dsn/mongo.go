package dsn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	mongoidem "github.com/idemgo/idem/store/mongo"
)

func init() {
	register("mongodb", openMongo)
	aliases["mongodb+srv"] = "mongodb"
	storeNames["mongodb"] = "MongoDB"
	startHints["mongodb"] = "mongod --dbpath DIR, or: docker run -d -p 27017:27017 mongo, " +
		"or FerretDB: ferretdb --handler=sqlite --sqlite-url=file:DIR/ --listen-addr=127.0.0.1:27017"
}

// mongoDefaultDatabase is the database of a DSN that names none.
const mongoDefaultDatabase = "idem"

// openMongo opens mongodb://[USER:PASS@]HOST[:PORT][,HOST...]/[DB][?collection=C&ttl=none|required]
// (mongodb+srv:// too) plus any option the driver reads from a connection
// string (replicaSet, authSource, tls, ...).
func openMongo(_ context.Context, u *url.URL, raw string) (*Handle, error) {
	q := u.Query()
	opts := mongoidem.Options{Collection: q.Get("collection")}
	switch ttl := q.Get("ttl"); ttl {
	case "", "auto":
	case "none":
		opts.TTLIndex = mongoidem.TTLNone
	case "required":
		opts.TTLIndex = mongoidem.TTLRequired
	default:
		return nil, fmt.Errorf("%w: %s: ttl=%q (want none, required or auto)", ErrBadDSN, Redact(raw), ttl)
	}
	q.Del("collection")
	q.Del("ttl")
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = mongoDefaultDatabase
	}
	// The driver reads the database in the path as the authentication
	// database; keep it there, with only the driver's own options.
	uri := raw
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	if enc := q.Encode(); enc != "" {
		uri += "?" + enc
	}
	copts := options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second)
	c, err := mongo.Connect(copts)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	closeClient := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Disconnect(ctx)
	}
	s, err := mongoidem.New(c.Database(db), opts)
	if err != nil {
		closeClient()
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	coll := s.Collection().Name()
	return &Handle{Store: s, Native: s, Migrate: s.Migrate, Close: closeClient,
		Where: "database " + db + ", collection " + coll, table: coll, tableGiven: opts.Collection != "",
		ping: func(ctx context.Context) error { return mongoPing(ctx, c) }}, nil
}

// mongoPing checks that the server answers and takes the DSN's credentials;
// a refused login is ErrAuth (the driver's text matches none of classify's).
func mongoPing(ctx context.Context, c *mongo.Client) error {
	err := c.Ping(ctx, readpref.Primary())
	var ce mongo.CommandError
	if err != nil && (errors.As(err, &ce) && (ce.Code == 18 || ce.Code == 13) || strings.Contains(err.Error(), "auth error")) {
		return fmt.Errorf("%w: %v (check the user, password and authSource in the DSN)", ErrAuth, err)
	}
	return err
}
