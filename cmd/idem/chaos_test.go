package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemgo/idem/cmd/idem/internal/chaos"
	"github.com/idemgo/idem/internal/testenv"
)

func TestChaosUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown store", []string{"chaos", "--store", "mongodb"}, "postgres, mysql, sqlite or redis"},
		{"unknown store url", []string{"chaos", "--store", "mongodb://127.0.0.1/x"}, "postgres, mysql, sqlite or redis"},
		{"unknown broker", []string{"chaos", "--broker", "pulsar"}, "nats, amqp, kafka, servicebus, eventhubs, redisstream, mqtt, sqs, pubsub"},
		{"sqs url", []string{"chaos", "--broker", "sqs://127.0.0.1:9324?dlq=x"}, "pass --broker sqs"},
		{"servicebus connection string", []string{"chaos", "--broker", "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"}, "pass --broker servicebus"},
		{"eventhubs connection string", []string{"chaos", "--broker", "eventhubs:Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"}, "pass --broker eventhubs"},
		{"eventhubs on sqlite", []string{"chaos", "--broker", "eventhubs", "--store", "sqlite"}, "--store postgres"},
		{"redis without url", []string{"chaos", "--broker", "redis"}, "--broker redisstream"},
		{"kafka url", []string{"chaos", "--broker", "kafka://127.0.0.1:9092"}, "kfake"},
		{"no orders", []string{"chaos", "--orders", "0"}, "--orders"},
		{"negative kills", []string{"chaos", "--kills", "-1"}, "--kills cannot be negative"},
		{"no delivery limit", []string{"chaos", "--max-deliver", "0"}, "--max-deliver must be at least 1"},
		{"positional", []string{"chaos", "extra"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("status %d, want %d; stderr lacks %q:\n%s", code, exitUsage, tc.want, stderr)
			}
		})
	}
}

// TestChaosJSON runs a small idem chaos through the command line, on the
// harness's private redis-server and nats-server, its consumers being this
// test binary started again (init dispatches them).
func TestChaosJSON(t *testing.T) {
	for _, bin := range []string{"redis-server", "nats-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			if testenv.Required() {
				t.Fatalf("%s is not installed [IDEM_REQUIRE_SERVICES=1]", bin)
			}
			t.Skipf("%s is not installed", bin)
		}
	}
	code, stdout, stderr := runCmd(t, "chaos", "--store", "redis", "--orders", "300", "--consumers", "2", "--json", "--quiet", "--seed", "5")
	if code != exitOK {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := decode(t, stdout)
	for _, k := range []string{"orders", "deliveries", "kills", "restarts", "doubles", "lost", "dead_lettered", "naive_doubles", "verdict_ok"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q:\n%s", k, stdout)
		}
	}
	if m["verdict_ok"] != true || m["doubles"].(float64) != 0 || m["lost"].(float64) != 0 || m["orders"].(float64) != 300 {
		t.Errorf("verdict:\n%s", stdout)
	}
	if m["naive_doubles"].(float64) == 0 {
		t.Errorf("the naive consumer found no doubles:\n%s", stdout)
	}
}

// TestChaosBrokerRedisStreams: --broker redisstream is the harness's own
// redis-server, a redis:// URL the user's Redis for Redis Streams.
func TestChaosBrokerRedisStreams(t *testing.T) {
	for arg, url := range map[string]string{"redisstream": "", "redis://127.0.0.1:6390/0": "redis://127.0.0.1:6390/0"} {
		var cfg chaos.Config
		if err := chaosBroker(&cfg, arg); err != nil || cfg.Broker != "redisstream" || cfg.BrokerURL != url {
			t.Errorf("--broker %s: broker %q, URL %q, %v; want redisstream, %q", arg, cfg.Broker, cfg.BrokerURL, err, url)
		}
	}
}

// TestChaosBrokerMQTT: --broker mqtt is the harness's own mosquitto, an
// mqtt:// URL the user's broker.
func TestChaosBrokerMQTT(t *testing.T) {
	for arg, url := range map[string]string{"mqtt": "", "mqtt://127.0.0.1:1884": "mqtt://127.0.0.1:1884"} {
		var cfg chaos.Config
		if err := chaosBroker(&cfg, arg); err != nil || cfg.Broker != "mqtt" || cfg.BrokerURL != url {
			t.Errorf("--broker %s: broker %q, URL %q, %v; want mqtt, %q", arg, cfg.Broker, cfg.BrokerURL, err, url)
		}
	}
}

// TestChaosInProcessBrokers runs a small idem chaos on the brokers the
// harness hosts in process beside its consumers (sqstest, pstest,
// servicebustest), on
// SQLite: consumers SIGKILLed at the hooks and at random, the verdict from
// the effects, and the naive consumer's doubles.
func TestChaosInProcessBrokers(t *testing.T) {
	for _, broker := range []string{"sqs", "pubsub", "servicebus"} {
		t.Run(broker, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "chaos", "--store", "sqlite", "--broker", broker, "--orders", "150", "--consumers", "2",
				"--kills", "2", "--json", "--quiet", "--seed", "3")
			if code != exitOK {
				t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			m := decode(t, stdout)
			if m["verdict_ok"] != true || m["broker"] != broker || m["doubles"].(float64) != 0 || m["lost"].(float64) != 0 ||
				m["kills"].(float64) == 0 || m["naive_doubles"].(float64) == 0 {
				t.Errorf("verdict:\n%s", stdout)
			}
		})
	}
}

// TestChaosBrokerTable: every broker kind of the table the harness has a
// transport for is accepted as --broker KIND.
func TestChaosBrokerTable(t *testing.T) {
	for _, d := range drivers {
		var cfg chaos.Config
		err := chaosBroker(&cfg, d.kind)
		if !d.chaos {
			var ue usageError
			if !errors.As(err, &ue) {
				t.Errorf("--broker %s: %v, want a usage error (no chaos transport)", d.kind, err)
			}
			continue
		}
		if err != nil || cfg.Broker != d.kind || cfg.BrokerURL != "" {
			t.Errorf("--broker %s: broker %q, URL %q, %v", d.kind, cfg.Broker, cfg.BrokerURL, err)
		}
	}
}
