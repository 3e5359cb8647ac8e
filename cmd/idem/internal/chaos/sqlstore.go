package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the database/sql driver of the private MariaDB's set-up

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/sqlite"
)

// setupSQL makes one pass's tables afresh on MariaDB or SQLite and
// migrates idem's records table (dropped first, with its version).
func setupSQL(ctx context.Context, kind, url string, t tables) error {
	h, err := dsn.Open(ctx, withTable(url, t.Records))
	if err != nil {
		return err
	}
	defer h.Close()
	id, text := "id bigint auto_increment primary key", "varchar(64)"
	if kind == "sqlite" {
		id, text = "id integer primary key autoincrement", "text"
	}
	stmts := []string{
		`drop table if exists ` + t.Charges,
		`drop table if exists ` + t.Balances,
		`create table ` + t.Charges + ` (` + id + `, order_id ` + text + ` not null, account ` + text + ` not null,
			amount bigint not null, pid int not null)`,
		`create table ` + t.Balances + ` (account ` + text + ` primary key, balance bigint not null)`,
	}
	if t.Records != "" {
		stmts = append(stmts, `drop table if exists `+t.Records)
		if kind == "mysql" {
			stmts = append(stmts, `drop table if exists `+t.Records+`_migrations`)
		}
	}
	for _, s := range stmts {
		if _, err := h.SQL.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("chaos: set up the tables: %w", err)
		}
	}
	if t.Records == "" {
		return nil
	}
	if kind == "sqlite" {
		// The version table may not exist yet: nothing to forget then.
		h.SQL.ExecContext(ctx, `delete from `+sqlite.VersionTable+` where table_name = ?`, t.Records)
	}
	return h.Migrate(ctx)
}

// readSQL reads the charges and balances of a pass on MariaDB or SQLite.
func readSQL(ctx context.Context, url string, t tables, ef *effects) error {
	h, err := dsn.Open(ctx, url)
	if err != nil {
		return err
	}
	defer h.Close()
	rows, err := h.SQL.QueryContext(ctx, `select order_id, account, amount from `+t.Charges)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var o Order
		if err := rows.Scan(&o.Order, &o.Account, &o.Amount); err != nil {
			return err
		}
		ef.charges[o.Order] = append(ef.charges[o.Order], o)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	brows, err := h.SQL.QueryContext(ctx, `select account, balance from `+t.Balances)
	if err != nil {
		return err
	}
	defer brows.Close()
	for brows.Next() {
		var a string
		var b int64
		if err := brows.Scan(&a, &b); err != nil {
			return err
		}
		ef.balances[a] = b
	}
	return brows.Err()
}

// mariadbBin finds mariadbd (or mysqld) and mariadb-install-db (or
// mysql_install_db): on the PATH, else in /usr/sbin.
func mariadbBin(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		if p := filepath.Join("/usr/sbin", n); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s (apt-get install mariadb-server, or pass --store mysql://...)", ErrNoServer, names[0])
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartMariaDB makes a private MariaDB data directory with
// mariadb-install-db and runs mariadbd on it, on a private port and
// socket, without grant tables (no password: it listens on loopback only).
// Restart is a SIGKILL, an immediate crash: InnoDB recovers from its redo
// log, which every commit writes to the kernel (innodb_flush_log_at_trx_commit=2:
// a process crash loses nothing; only a power loss would).
func StartMariaDB(ctx context.Context) (Server, error) {
	server, err := mariadbBin("mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	install, err := mariadbBin("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	dir, err := privateDir("mariadb")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	args := []string{"--no-defaults", "--datadir=" + data, "--skip-test-db", "--auth-root-authentication-method=normal", "--skip-name-resolve"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ctx, install, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("chaos: mariadb-install-db: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	argv := []string{server, "--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
		"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve", "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2", "--max-connections=400"}
	if os.Geteuid() == 0 {
		argv = append(argv, "--user=root")
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &procServer{name: "mariadbd", dir: dir, addr: addr, url: "mysql://root@" + addr + "/chaos", kill: syscall.SIGKILL,
		log: log, argv: argv}
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	db, err := sql.Open("mysql", "root@tcp("+addr+")/")
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = db.ExecContext(cctx, "create database if not exists chaos")
		cancel()
		db.Close()
	}
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("chaos: MariaDB at %s: %w", addr, err)
	}
	return s, nil
}
