package dsn

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem/store/mysql"
)

func init() { register("mysql", openMySQL) }

// openMySQL maps mysql://USER:PASS@HOST:PORT/DB?table=T&param=v to the
// driver's USER:PASS@tcp(HOST:PORT)/DB?param=v. The table parameter picks
// the records table (default idem_records).
func openMySQL(_ context.Context, u *url.URL, raw string) (*Handle, error) {
	d, table, err := mysqlDriverDSN(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	s, err := mysql.Open(d, mysql.Options{Table: table})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	return &Handle{Store: s, Native: s, SQL: s.DB(), Migrate: s.Migrate, Close: s.Close, Where: "table " + s.Table(),
		table: s.Table(), tableGiven: table != "", ping: s.DB().PingContext, tables: mysqlTables(s.DB())}, nil
}

// mysqlDriverDSN converts the URL form to the driver's DSN and extracts the
// table parameter.
func mysqlDriverDSN(u *url.URL) (driverDSN, table string, err error) {
	q := u.Query()
	table = q.Get("table")
	q.Del("table")
	host := u.Host
	if host == "" {
		host = "127.0.0.1:3306"
	} else if u.Port() == "" {
		host += ":3306"
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", "", fmt.Errorf("name the database, e.g. mysql://user@127.0.0.1:3306/app")
	}
	var cred string
	if u.User != nil {
		cred = u.User.Username()
		if p, ok := u.User.Password(); ok {
			cred += ":" + p
		}
		cred += "@"
	}
	driverDSN = cred + "tcp(" + host + ")/" + db
	if len(q) > 0 {
		driverDSN += "?" + q.Encode()
	}
	return driverDSN, table, nil
}

// MySQLURL converts a go-sql-driver/mysql DSN (user:pass@tcp(host:port)/db)
// to the mysql:// form the commands take, for programs and tests that hold
// the driver's form.
func MySQLURL(driverDSN string) (string, error) {
	cfg, err := gomysql.ParseDSN(driverDSN)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadDSN, err)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	switch {
	case cfg.Passwd != "": // with or without a user name: a password is never dropped
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	case cfg.User != "":
		u.User = url.User(cfg.User)
	}
	s := u.String()
	if _, err := url.Parse(s); err != nil { // an address no URL can hold ("( )/db")
		return "", fmt.Errorf("%w: %q: address %q: %v", ErrBadDSN, driverDSN, cfg.Addr, unwrapURL(err))
	}
	return s, nil
}
