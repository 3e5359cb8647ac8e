package dsn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgo/idem"
)

// probeTimeout bounds one probe or ping: a server that does not answer in
// this long is reported as unreachable rather than waited for.
const probeTimeout = 10 * time.Second

// probeKey is read to check a store: it never exists, so the answer is
// ErrNotFound when the server answers and the schema is there.
var probeKey = idem.Key{Scope: "idem-cli", ID: "probe"}

// storeNames name each scheme's server in messages.
var storeNames = map[string]string{
	"memory": "memory", "sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB/MySQL", "redis": "Redis",
}

// startHints say how to start each scheme's server on a development machine.
var startHints = map[string]string{
	"postgres": "pg_ctl -D DATADIR start, or: docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres",
	"mysql":    "mysqld_safe &, or: docker run -d -p 3306:3306 -e MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1 -e MARIADB_DATABASE=test mariadb",
	"redis":    "redis-server --daemonize yes, or: docker run -d -p 6379:6379 redis",
}

// StoreName is the name of the scheme's server ("PostgreSQL", "Redis").
func StoreName(scheme string) string {
	if n := storeNames[scheme]; n != "" {
		return n
	}
	return scheme
}

// ping checks that the server answers and takes the DSN's credentials,
// without looking at the schema. It returns a classified error.
func (h *Handle) pingServer(ctx context.Context) error {
	if h.ping == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := h.ping(pctx); err != nil {
		return h.classify(ctx, err)
	}
	return nil
}

// probe checks that the server answers and the schema exists, and turns a
// failure into an error that says how to fix it.
func (h *Handle) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if h.schema != nil {
		err := h.schema(pctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, idem.ErrSchemaMissing):
			return h.noSchema(pctx, err)
		}
		return h.classify(ctx, err)
	}
	_, err := h.Store.Get(pctx, probeKey)
	if err == nil || errors.Is(err, idem.ErrNotFound) {
		return nil
	}
	if cerr := h.classify(ctx, err); !errors.Is(cerr, ErrNoSchema) {
		return cerr
	}
	return h.noSchema(pctx, err)
}

// noSchema explains a missing records table. When the DSN names no table
// and the database holds idem's records under another name, the DSN most
// likely lacks its ?table= parameter: migrating it as it is would create a
// second, empty table, so the advice is the parameter, not migrate. A DSN
// that names its table gets the migrate it asks for, with the tables found
// beside it mentioned.
func (h *Handle) noSchema(ctx context.Context, cause error) error {
	others, _ := h.OtherTables(ctx)
	if len(others) > 0 && !h.tableGiven {
		return fmt.Errorf("%w: %s has no table %s, but idem's records are in %s: name the table in the DSN, e.g. --store '%s'%s "+
			"(idem migrate on this DSN would create a second, empty table %s beside them) [%v]",
			ErrNoSchema, h.Redacted, h.table, strings.Join(others, ", "), SetParam(h.Redacted, "table", others[0]),
			h.PasswordNote(), h.table, cause)
	}
	beside := ""
	if len(others) > 0 {
		beside = fmt.Sprintf("; the database keeps idem's records in %s: to read those, name that table", strings.Join(others, ", "))
	}
	kind := "table"
	if h.Scheme == "cosmos" {
		kind = "container"
	}
	return fmt.Errorf("%w: %s has no %s %s yet; create it with: idem migrate --store '%s'%s%s [%v]",
		ErrNoSchema, h.Redacted, kind, h.table, h.Redacted, h.PasswordNote(), beside, cause)
}

// Table is the records table (the collection, on MongoDB) the handle reads
// and writes; "" for stores without one (memory, Redis).
func (h *Handle) Table() string { return h.table }

// TableGiven reports whether the DSN names its table (?table=, ?collection=)
// rather than leaving it to the default.
func (h *Handle) TableGiven() bool { return h.tableGiven }

// OtherTables lists the tables of the database that hold idem's records
// (those with every column of a records table), the handle's own left out:
// where a DSN that lacks its ?table= would find the real records. Nil for
// stores that cannot list their tables.
func (h *Handle) OtherTables(ctx context.Context) ([]string, error) {
	if h.tables == nil {
		return nil, nil
	}
	all, err := h.tables(ctx)
	var others []string
	for _, t := range all {
		if t != h.table {
			others = append(others, t)
		}
	}
	return others, err
}

// PasswordNote reminds the reader of advice that shows a redacted DSN to
// put the password back: "" when the DSN had none.
func (h *Handle) PasswordNote() string {
	if h.Redacted != h.raw {
		if h.Scheme == "cosmos" {
			return " (with the key in place of xxxxx)"
		}
		return " (with the password in place of xxxxx)"
	}
	return ""
}

// classify wraps a store error in ErrAuth, ErrNoSchema or ErrUnreachable,
// naming the store and saying what to do. Driver error types are checked
// where the driver has them, the text otherwise (go-redis has none). When
// the caller's ctx ended, the error is that, not a verdict on the server.
func (h *Handle) classify(ctx context.Context, err error) error {
	name := StoreName(h.Scheme)
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s at %s: %w", name, h.Redacted, cerr)
	}
	msg := strings.ToLower(err.Error())
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	var (
		pgErr *pgconn.PgError
		myErr *gomysql.MySQLError
		opErr *net.OpError
	)
	pgCode := ""
	if errors.As(err, &pgErr) {
		pgCode = pgErr.Code
	}
	myCode := uint16(0)
	if errors.As(err, &myErr) {
		myCode = myErr.Number
	}
	var certErr *tls.CertificateVerificationError
	httpCode := statusCode(err)
	switch {
	case httpCode == http.StatusUnauthorized || httpCode == http.StatusForbidden || h.Scheme == "cosmos" && has("response 401", "response 403"):
		// azcosmos reports a refused account read in text only.
		return fmt.Errorf("%w: %s at %s: %v (check the account key: ?key= in the DSN, or $%s)", ErrAuth, name, h.Redacted, err, CosmosKeyEnv)
	case errors.As(err, &certErr) || has("tls: failed to verify certificate", "x509: certificate signed by unknown authority"):
		hint := "trust the certificate's issuer on this host"
		if h.Scheme == "cosmos" {
			hint = "for the emulator, pass its certificate as ?ca=FILE"
		}
		return fmt.Errorf("%w: %s at %s does not present a certificate this host trusts: %v (%s)",
			ErrUnreachable, name, h.Redacted, err, hint)
	case pgCode == "28P01" || pgCode == "28000" || myCode == 1045 || myCode == 1044 || myCode == 1698 ||
		has("password authentication failed", "no pg_hba.conf entry", "access denied for user", "sqlstate 28p01", "error 1045",
			"wrongpass", "noauth", "invalid password", "invalid username-password", "authentication required"):
		return fmt.Errorf("%w: %s at %s: %v (check the user and password in the DSN)", ErrAuth, name, h.Redacted, err)
	case pgCode == "3D000" || myCode == 1049 || has("sqlstate 3d000", "error 1049"):
		return fmt.Errorf("%s at %s: %v (the database named in the DSN does not exist: create it, or name another)",
			name, h.Redacted, err)
	case pgCode == "42P01" || myCode == 1146 || has("no such table", "undefined_table", "sqlstate 42p01", "error 1146"):
		return fmt.Errorf("%w: %v", ErrNoSchema, err)
	case h.Scheme == "sqlite" || h.Scheme == "memory":
		// No server: whatever failed is the file's or the library's.
	case errors.As(err, &opErr) || errors.Is(err, context.DeadlineExceeded) ||
		has("connection refused", "no such host", "i/o timeout", "dial tcp", "dial error", "connect: ",
			"network is unreachable", "server closed", "eof", "context deadline exceeded"):
		hint := "is it running and the address right?"
		if s := startHints[h.Scheme]; s != "" {
			hint = "is it running and the address right? start one with: " + s
		}
		return fmt.Errorf("%w: no %s server answers at %s: %v (%s)", ErrUnreachable, name, h.Redacted, err, hint)
	}
	return fmt.Errorf("%s at %s: %w", name, h.Redacted, err)
}

// statusCode is the HTTP status of an Azure SDK call the server answered
// with an error, 0 otherwise.
func statusCode(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
