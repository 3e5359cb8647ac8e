package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/testenv"
)

// demoKeys are the keys scripts rely on in idem demo --json.
var demoKeys = []string{"published", "unique", "deliveries", "duplicates_suppressed", "conflicts",
	"effects_applied", "naive_effects_applied", "invariant_ok"}

func TestDemoDefaults(t *testing.T) {
	code, out, stderr := runCmd(t, "demo")
	if code != exitOK {
		t.Fatalf("idem demo: exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []string{"published", "unique orders", "duplicates suppressed", "conflicts dead-lettered",
		"charges applied by idem", "charges applied by naive consumer", "exactly-once invariant", "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoChaosJSON(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--json", "--messages", "300", "--consumers", "4",
		"--crash-rate", "0.3", "--dup-rate", "0.5", "--seed", "7")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	for _, k := range demoKeys {
		if _, ok := rep[k]; !ok {
			t.Errorf("JSON report lacks %q", k)
		}
	}
	num := func(k string) int {
		v, _ := rep[k].(float64)
		return int(v)
	}
	if rep["invariant_ok"] != true {
		t.Fatalf("invariant broken: %v", rep["offending"])
	}
	if num("unique") != 300 || num("effects_applied") != 300 {
		t.Errorf("unique %d, effects_applied %d; want 300 each", num("unique"), num("effects_applied"))
	}
	if num("naive_effects_applied") <= num("unique") {
		t.Errorf("the naive consumer applied %d charges for %d orders: chaos and retries should make it over-apply",
			num("naive_effects_applied"), num("unique"))
	}
	if num("duplicates_suppressed") == 0 || num("conflicts") == 0 || num("crashes") == 0 {
		t.Errorf("chaos left no trace: %v", rep)
	}
	if num("deliveries") < num("published") {
		t.Errorf("deliveries %d < published %d", num("deliveries"), num("published"))
	}
}

func TestDemoTwoPhase(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--json", "--store", "memory://", "--mode", "two-phase", "--messages", "200",
		"--crash-rate", "0.2", "--seed", "11")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	if rep["mode"] != "two-phase" || rep["invariant_ok"] != true || rep["effects_applied"] != float64(200) {
		t.Fatalf("report: %v", rep)
	}
}

// TestDemoRealBroker runs the demo against the NATS server named by the test
// environment and checks that it deletes its stream.
func TestDemoRealBroker(t *testing.T) {
	addr := testenv.NATS.Need(t)
	code, out, stderr := runCmd(t, "demo", "--json", "--broker", addr, "--messages", "150", "--crash-rate", "0.1", "--seed", "3")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	if rep["invariant_ok"] != true || rep["broker"] != addr {
		t.Fatalf("report: %v", rep)
	}
	nc, err := nats.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		if n == "IDEM_DEMO_"+rep["run_id"].(string) {
			t.Errorf("the demo left its stream %s behind", n)
		}
	}
}

// TestDemoRabbitMQ runs the demo on the RabbitMQ server named by the test
// environment and checks that it deletes its queues.
func TestDemoRabbitMQ(t *testing.T) {
	addr := testenv.RabbitMQ.Need(t)
	code, out, stderr := runCmd(t, "demo", "--json", "--broker", addr, "--messages", "150", "--crash-rate", "0.2", "--seed", "5")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	if rep["invariant_ok"] != true || rep["naive_effects_applied"].(float64) <= rep["unique"].(float64) {
		t.Fatalf("report: %v", rep)
	}
	conn, err := amqp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"idem", "naive", "dlq"} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		name := "idem.demo." + rep["run_id"].(string) + "." + q
		if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err == nil {
			t.Errorf("the demo left queue %s behind", name)
			ch.Close()
		}
	}
}
