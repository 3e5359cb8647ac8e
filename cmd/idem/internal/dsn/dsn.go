// Package dsn opens an idem store from a data source name, the one string an
// operator passes to every idem command (--store or IDEM_STORE):
//
//	memory://[NAME]                          in-process store (NAME shares one store within a process)
//	sqlite://PATH[?table=T&sync=normal]      embedded SQLite database file
//	postgres://USER@HOST:PORT/DB[?table=T&partitions=N&...]  PostgreSQL (also postgresql://)
//	mysql://USER@HOST:PORT/DB[?table=T&...]  MariaDB / MySQL (also mariadb://)
//	redis://HOST:PORT[/DB][?prefix=P&...]    Redis (also rediss://)
//	mongodb://HOST:PORT/[DB][?collection=C&...]  MongoDB API (also mongodb+srv://)
//	cosmos://HOST[:PORT][?key=K&database=D&container=C&ca=FILE]  Azure Cosmos DB for NoSQL
//
// Forms is the whole reference, as --help prints it.
//
// Schemes whose store package is not part of this build are reported with
// the list of those that are. Errors say what was wrong and how to fix it:
//
//	h, err := dsn.Open(ctx, "sqlite:///var/lib/app/idem.db")
//	if err != nil { ... }
//	defer h.Close()
//	g, err := idem.New(h.Store, idem.Options{Scope: "billing"})
package dsn

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrBadDSN means the string is not a DSN this command understands.
	ErrBadDSN = errors.New("bad store DSN")
	// ErrUnknownScheme means no store is registered for the DSN's scheme.
	ErrUnknownScheme = errors.New("unknown store scheme")
	// ErrUnreachable means the store's server did not answer.
	ErrUnreachable = errors.New("store unreachable")
	// ErrAuth means the store's server refused the DSN's credentials.
	ErrAuth = errors.New("store login refused")
	// ErrNoSchema means the store answered but its tables do not exist.
	ErrNoSchema = errors.New("store schema missing")
	// ErrNotSupported means the store cannot do what was asked (no
	// Inspector for list / stats, no schema to migrate, ...).
	ErrNotSupported = errors.New("not supported by this store")
)

// Handle is an open store.
type Handle struct {
	// Scheme is the DSN's scheme, normalised (postgresql → postgres).
	Scheme string
	// Name is the store's server for messages ("PostgreSQL", "Redis").
	Name string
	// Redacted is the DSN with any password replaced, for messages.
	Redacted string
	// Where names where the records live within the store: "table
	// idem_records", "prefix idem", or "" (memory).
	Where string
	// Store is the idem store.
	Store idem.Store
	// Native is the store package's own value (*sqlite.Store, ...), for
	// callers that need more than idem.Store.
	Native any
	// SQL is the database of stores over database/sql (sqlite, mysql), for
	// callers that write beside the records (the demo's ledger, bench's
	// baseline); nil otherwise.
	SQL *sql.DB
	// PG is the pool of the postgres store; nil otherwise.
	PG *pgxpool.Pool
	// Redis is the client of the redis store; nil otherwise.
	Redis goredis.UniversalClient
	// Cosmos is the client of the cosmos store's account; nil otherwise.
	Cosmos *azcosmos.Client
	// Migrate creates or upgrades the schema; nil when the store has none.
	Migrate func(ctx context.Context) error
	// Ping checks that the server answers and takes the DSN's credentials,
	// schema or not; nil when there is no server (memory). Its errors are
	// ErrUnreachable or ErrAuth with a hint, or the server's own.
	Ping func(ctx context.Context) error
	// Probe checks that the server answers and the schema exists; nil when
	// there is nothing to check. Its errors say how to fix what is wrong:
	// ErrUnreachable, ErrAuth, ErrNoSchema (with the ?table= a DSN lacks
	// when the database holds idem's records under another name).
	Probe func(ctx context.Context) error
	// Close releases the store's connections.
	Close func() error

	raw        string                                      // the DSN as given
	table      string                                      // the records table (SQL stores)
	tableGiven bool                                        // the DSN names its table (?table=)
	ping       func(ctx context.Context) error             // the driver's ping; nil: no server
	tables     func(ctx context.Context) ([]string, error) // idem records tables in the database
	// schema checks the schema where a read of a missing key cannot tell
	// a missing table from a missing record (Cosmos DB answers 404 to both);
	// nil: Probe reads a key.
	schema func(ctx context.Context) error
}

// opener opens one scheme.
type opener func(ctx context.Context, u *url.URL, raw string) (*Handle, error)

var openers = map[string]opener{}

// aliases map alternative spellings to the registered scheme.
var aliases = map[string]string{"postgresql": "postgres", "rediss": "redis", "mariadb": "mysql"}

// planned are schemes idem knows of whose store package is not in this build.
var planned = []string{"sqlite", "postgres", "mysql", "redis", "cosmos"}

func register(scheme string, o opener) { openers[scheme] = o }

// Schemes lists the schemes this build can open, sorted.
func Schemes() []string {
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by raw. The caller closes the handle.
func Open(ctx context.Context, raw string) (*Handle, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, fmt.Errorf("%w: empty (pass --store DSN or set IDEM_STORE; schemes: %s)", ErrBadDSN, schemeList())
	}
	i := strings.Index(raw, "://")
	if i <= 0 {
		return nil, fmt.Errorf("%w: %q has no scheme (write it as SCHEME://..., e.g. sqlite://idem.db; schemes: %s)",
			ErrBadDSN, Redact(raw), schemeList())
	}
	scheme := strings.ToLower(raw[:i])
	if a, ok := aliases[scheme]; ok {
		scheme = a
	}
	o := openers[scheme]
	if o == nil {
		for _, p := range planned {
			if p == scheme {
				return nil, fmt.Errorf("%w: %q: the %s store is not available in this build yet (available: %s)",
					ErrUnknownScheme, scheme, scheme, schemeList())
			}
		}
		return nil, fmt.Errorf("%w: %q (available: %s)", ErrUnknownScheme, scheme, schemeList())
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), unwrapURL(err))
	}
	h, err := o(ctx, u, raw)
	if err != nil {
		return nil, err
	}
	h.Scheme = scheme
	h.Name = StoreName(scheme)
	h.raw = raw
	h.Redacted = Redact(raw)
	if h.ping != nil {
		h.Ping = h.pingServer
		h.Probe = h.probe
	}
	if h.Close == nil {
		h.Close = func() error { return nil }
	}
	return h, nil
}

func schemeList() string {
	s := Schemes()
	for i := range s {
		s[i] += "://"
	}
	return strings.Join(s, ", ")
}

// Redact hides the password of a URL-shaped DSN (or broker URL), and the
// value of a key= parameter (a cosmos:// DSN's account key).
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactKey(redactText(raw))
	}
	if u.User == nil {
		return redactKey(raw)
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return redactKey(u.String())
}

// keyParam is a key= parameter and its value.
var keyParam = regexp.MustCompile(`([?&]key=)[^&#]*`)

// redactKey hides the value of every key= parameter of raw.
func redactKey(raw string) string { return keyParam.ReplaceAllString(raw, "${1}xxxxx") }

// redactText hides the password of a DSN that url.Parse rejects (a bad
// port, a stray character), which error messages quote: everything from
// the first ':' after the user name to the last '@'.
func redactText(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	c := strings.Index(rest[:at], ":")
	if c < 0 {
		return raw
	}
	return raw[:i+3] + rest[:c+1] + "xxxxx" + rest[at:]
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
