package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoServer is wrapped by the error of a private server whose binary is
// not installed: the caller skips (a test) or says what to install.
var ErrNoServer = errors.New("chaos: server binary not found")

// Server is one store or broker server the harness runs on a private port
// and directory, so restarting it disturbs nothing else on the machine.
type Server interface {
	// URL is the address clients use.
	URL() string
	// Restart stops the server abruptly where that is safe for its data
	// (PostgreSQL immediate mode: a crash and WAL recovery; Redis SIGKILL
	// with appendfsync always) and starts it again on the same port and
	// data.
	Restart(ctx context.Context) error
	// Stop stops it for good and removes its directory.
	Stop()
}

// memServer is a broker the harness hosts in its own process
// (servicebustest, eventhubstest), reached at url: it keeps what it holds
// in memory, so it is never restarted.
type memServer[S any] struct {
	srv   S
	name  string
	url   string
	close func() error
}

func (s *memServer[S]) URL() string { return s.url }

func (s *memServer[S]) Restart(context.Context) error {
	return fmt.Errorf("chaos: %s keeps what it holds in memory: it is never restarted", s.name)
}

func (s *memServer[S]) Stop() { s.close() }

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitPort waits until something accepts connections on addr.
func waitPort(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: nothing listens on %s after %s: %w", addr, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// privateDir makes a directory that a server running as another OS user
// can use (os.MkdirTemp and t.TempDir make 0700 directories owned by the
// caller).
func privateDir(name string) (string, error) {
	dir, err := os.MkdirTemp("", "idem-chaos-"+name+"-")
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// procServer is a server process started from a command line, restarted by
// a signal and the same command line again.
type procServer struct {
	name, dir, url, addr string
	argv                 []string
	kill                 syscall.Signal // how Restart stops it
	log                  *os.File
	cmd                  *exec.Cmd
	done                 chan struct{}
}

func (s *procServer) URL() string { return s.url }

func (s *procServer) start(ctx context.Context) error {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start %s: %w", s.name, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.done)
	if err := waitPort(ctx, s.addr, 15*time.Second); err != nil {
		return fmt.Errorf("%w (log: %s)", err, s.log.Name())
	}
	return nil
}

func (s *procServer) halt(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *procServer) Restart(ctx context.Context) error {
	s.halt(s.kill)
	return s.start(ctx)
}

func (s *procServer) Stop() {
	s.halt(syscall.SIGKILL)
	s.log.Close()
	os.RemoveAll(s.dir)
}

// StartNATS runs nats-server with JetStream on a private port and store
// directory. Restart stops it with SIGTERM, not SIGKILL: nats-server before
// 2.10 acknowledges a publish before its file store has written it, so a
// SIGKILL may lose acknowledged messages, which is the broker's loss and
// not the one this harness measures.
func StartNATS(ctx context.Context) (Server, error) {
	return startProc(ctx, "nats-server", "nats", syscall.SIGTERM, "apt-get install nats-server, or pass --broker",
		func(dir, port string) []string {
			return []string{"-a", "127.0.0.1", "-p", port, "-js", "-sd", filepath.Join(dir, "js")}
		})
}

// StartRedis runs redis-server on a private port with an append-only file
// synced on every write, so a SIGKILL (Restart) loses nothing it answered.
func StartRedis(ctx context.Context) (Server, error) {
	return startRedis(ctx, "apt-get install redis-server, or pass --store redis://...")
}

// StartRedisBroker is StartRedis for the Redis Streams broker: a
// redis-server of its own, apart from the store's.
func StartRedisBroker(ctx context.Context) (Server, error) {
	return startRedis(ctx, "apt-get install redis-server, or pass --broker redis://...")
}

func startRedis(ctx context.Context, install string) (Server, error) {
	return startProc(ctx, "redis-server", "redis", syscall.SIGKILL, install,
		func(dir, port string) []string {
			return []string{"--bind", "127.0.0.1", "--port", port, "--dir", dir, "--save", "",
				"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"}
		})
}

// startProc starts the server binary name with the arguments args gives
// for its private directory and port; scheme makes its URL.
func startProc(ctx context.Context, name, scheme string, kill syscall.Signal, install string,
	args func(dir, port string) []string) (Server, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s)", ErrNoServer, name, install)
	}
	dir, err := privateDir(scheme)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	s := &procServer{name: name, dir: dir, addr: addr, url: scheme + "://" + addr, kill: kill, log: log,
		argv: append([]string{bin}, args(dir, strconv.Itoa(port))...)}
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// pgServer is a PostgreSQL cluster of the harness's own, made with initdb
// and run with pg_ctl, as the postgres OS user when the harness is root
// (PostgreSQL refuses to run as root).
type pgServer struct {
	bin, dir, data, url string
	port                int
	cred                *syscall.Credential
}

// PostgresBinDir finds the directory holding initdb and pg_ctl: on the PATH,
// else the newest /usr/lib/postgresql/*/bin.
func PostgresBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: initdb and pg_ctl (apt-get install postgresql, or pass --store-url)", ErrNoServer)
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// StartPostgres makes and starts a private PostgreSQL cluster (fsync off:
// the restarts are process crashes, and the kernel keeps what was written).
func StartPostgres(ctx context.Context) (Server, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := privateDir("pg")
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	owner := ""
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return nil, fmt.Errorf("chaos: PostgreSQL refuses to run as root and there is no postgres or nobody user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		owner = u.Username
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	user := "postgres"
	if out, err := s.pg(ctx, "initdb", "-D", s.data, "-U", user, "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("chaos: initdb (as %q): %w: %s", owner, err, out)
	}
	conf := fmt.Sprintf("\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n"+
		"full_page_writes = off\nmax_connections = 200\nshared_buffers = 64MB\n", s.port, s.dir)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f.WriteString(conf)
	f.Close()
	s.url = fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", user, s.port)
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *pgServer) pg(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, tool), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	return out, err
}

func (s *pgServer) start(ctx context.Context) error {
	if out, err := s.pg(ctx, "pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "30", "start"); err != nil {
		return fmt.Errorf("chaos: pg_ctl start: %w: %s", err, out)
	}
	return waitPort(ctx, "127.0.0.1:"+strconv.Itoa(s.port), 15*time.Second)
}

func (s *pgServer) URL() string { return s.url }

// Restart stops the cluster in immediate mode (no checkpoint: every
// backend is killed, the next start replays the WAL, as after a crash) and
// starts it again.
func (s *pgServer) Restart(ctx context.Context) error {
	if out, err := s.pg(ctx, "pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("chaos: pg_ctl stop: %w: %s", err, out)
	}
	return s.start(ctx)
}

func (s *pgServer) Stop() {
	s.pg(context.Background(), "pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
}

// userServer is a server the user runs: its URL, and the command that
// restarts it (none: never restarted).
type userServer struct{ url, restart string }

func (s userServer) URL() string { return s.url }

func (s userServer) Restart(ctx context.Context) error {
	if strings.TrimSpace(s.restart) == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, "/bin/sh", "-c", s.restart).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: restart command %q: %w: %s", s.restart, err, out)
	}
	return nil
}

func (s userServer) Stop() {}

// sqliteFile is the SQLite variant's "server": a database file in a
// private directory that the consumer processes share (WAL). There is no
// server to restart: Restart does nothing, and the harness schedules none.
type sqliteFile struct{ dir, url string }

// StartSQLite makes the private directory of the database file. The
// consumers open it with sync=normal: a process crash, the fault here,
// loses no commit (only a power loss could).
func StartSQLite(context.Context) (Server, error) {
	dir, err := privateDir("sqlite")
	if err != nil {
		return nil, err
	}
	return sqliteFile{dir: dir, url: "sqlite://" + filepath.Join(dir, "chaos.db") + "?sync=normal"}, nil
}

func (s sqliteFile) URL() string                   { return s.url }
func (s sqliteFile) Restart(context.Context) error { return nil }
func (s sqliteFile) Stop()                         { os.RemoveAll(s.dir) }
