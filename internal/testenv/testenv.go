// Package testenv finds the real servers that integration tests talk to.
//
// Each server's address comes from an environment variable with the local
// default. When the server does not answer, the test is skipped with a
// message saying how to start it, unless IDEM_REQUIRE_SERVICES=1 (set by CI),
// in which case it fails. The first skip for each server in a test process
// also prints one line to the process's standard output naming the server
// and how to start it (go test shows it with -v, or run in the package's
// directory), so a group of skips is never silent there.
package testenv

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Service describes one server tests may need.
type Service struct {
	Name    string // "PostgreSQL"
	Env     string // environment variable holding the address or URL
	Default string // used when Env is unset
	Start   string // how to start it locally
}

// Services used by the integration tests.
var (
	Postgres = Service{"PostgreSQL", "IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"}
	MySQL = Service{"MariaDB/MySQL", "IDEM_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test",
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"}
	Redis = Service{"Redis", "IDEM_REDIS_ADDR", "127.0.0.1:6379",
		`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no`}
	RabbitMQ = Service{"RabbitMQ", "IDEM_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/",
		"rabbitmq-server -detached"}
	NATS = Service{"NATS JetStream", "IDEM_NATS_URL", "nats://127.0.0.1:4222",
		"nats-server -a 127.0.0.1 -p 4222 -js"}
	MQTT = Service{"Mosquitto", "IDEM_MQTT_ADDR", "127.0.0.1:1883",
		"mosquitto -d -c /etc/mosquitto/mosquitto.conf"}
)

// All is every service, in CONTRIBUTING.md's order (a test keeps its
// table of test servers in step with it).
var All = []Service{Postgres, MySQL, Redis, RabbitMQ, NATS, MQTT, Mongo}

// Required reports whether CI demands every service (IDEM_REQUIRE_SERVICES=1).
func Required() bool { return os.Getenv("IDEM_REQUIRE_SERVICES") == "1" }

// Addr returns the service's configured address or URL.
func (s Service) Addr() string {
	if v := os.Getenv(s.Env); v != "" {
		return v
	}
	return s.Default
}

// Need returns the service's address if its port answers. Otherwise it skips
// the test (or fails it when services are required).
func (s Service) Need(t testing.TB) string {
	t.Helper()
	addr := s.Addr()
	hostport := hostPort(addr)
	c, err := net.DialTimeout("tcp", hostport, 2*time.Second)
	if err == nil {
		c.Close()
		return addr
	}
	msg := s.Name + " is not reachable at " + hostport + " (" + err.Error() + "); set " + s.Env +
		" or start it: " + s.Start
	if Required() {
		t.Fatal(msg + " [IDEM_REQUIRE_SERVICES=1]")
	}
	announce(s, msg)
	t.Skip(msg)
	return ""
}

var (
	// summaryOut is where the once-per-server skip line goes.
	summaryOut io.Writer = os.Stdout
	announced  sync.Map  // Service.Env → struct{}: its skip line was printed
)

// announce prints, once per server and process, the line saying that the
// tests needing s skip and how to start it.
func announce(s Service, msg string) {
	if _, done := announced.LoadOrStore(s.Env, struct{}{}); done {
		return
	}
	fmt.Fprintf(summaryOut, "testenv: SKIP every test of this package that needs %s: %s\n", s.Name, msg)
}

// hostPort extracts host:port from a URL, a go-sql-driver DSN or a bare address.
func hostPort(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return u.Host
	}
	// user:pass@tcp(host:port)/db
	if i := strings.Index(addr, "tcp("); i >= 0 {
		rest := addr[i+4:]
		if j := strings.Index(rest, ")"); j >= 0 {
			return rest[:j]
		}
	}
	return addr
}
