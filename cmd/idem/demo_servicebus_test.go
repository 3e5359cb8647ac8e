package main

import (
	"strings"
	"testing"
)

// TestDemoServiceBusJSON: idem demo --broker servicebus --json runs the
// scenario on the in-process Service Bus and holds the invariant; the
// topic's duplicate detection drops the producer's retries, and the
// crashes' redeliveries are what idem suppresses.
func TestDemoServiceBusJSON(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--broker", "servicebus", "--json", "--messages", "300", "--consumers", "4",
		"--crash-rate", "0.3", "--dup-rate", "0.5", "--seed", "7")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	for _, k := range append(demoKeys, "broker_dropped") {
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
	if !strings.Contains(rep["broker"].(string), "Service Bus") {
		t.Errorf("broker %q", rep["broker"])
	}
	if num("unique") != 300 || num("effects_applied") != 300 {
		t.Errorf("unique %d, effects_applied %d; want 300 each", num("unique"), num("effects_applied"))
	}
	if num("producer_retries") == 0 || num("broker_dropped") != num("producer_retries") {
		t.Errorf("%d producer retries, %d dropped by the broker: want all of them", num("producer_retries"), num("broker_dropped"))
	}
	if num("duplicates_suppressed") == 0 || num("conflicts") == 0 || num("crashes") == 0 {
		t.Errorf("chaos left no trace: %v", rep)
	}
	if num("naive_effects_applied") <= num("unique") {
		t.Errorf("the naive consumer applied %d charges for %d orders: the crashes' redeliveries should make it over-apply",
			num("naive_effects_applied"), num("unique"))
	}
}

// TestDemoHelpNamesInProcessAzure: --help says how to run the demo on
// the in-process Service Bus and Event Hubs.
func TestDemoHelpNamesInProcessAzure(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--help")
	if code != exitOK {
		t.Fatalf("exit status %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"--broker servicebus", "servicebus.NewConsumer", "or servicebus for an in-process Azure Service Bus",
		"--broker eventhubs", "eventhubs.NewConsumer", "eventhubs for an in-process Azure Event Hubs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --help lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoServiceBusRefusesANamespace(t *testing.T) {
	code, _, stderr := runCmd(t, "demo", "--broker", "Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s")
	if code != exitUsage || !strings.Contains(stderr, "in-process only") {
		t.Fatalf("exit status %d, stderr %q; want a usage error naming --broker servicebus", code, stderr)
	}
}

// TestDemoServiceBusOutbox: idem demo --broker servicebus --producer
// outbox runs the scenario with the outbox producer: the report names it,
// the outbox kept every producer retry once, and the invariant holds.
func TestDemoServiceBusOutbox(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--broker", "servicebus", "--producer", "outbox", "--json", "--messages", "200",
		"--consumers", "3", "--crash-rate", "0.2", "--dup-rate", "0.3", "--seed", "11")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	num := func(k string) int {
		v, _ := rep[k].(float64)
		return int(v)
	}
	if rep["invariant_ok"] != true {
		t.Fatalf("invariant broken: %v", rep["offending"])
	}
	if p, _ := rep["producer"].(string); !strings.Contains(p, "outbox") {
		t.Errorf("producer %q, want the outbox", rep["producer"])
	}
	if num("effects_applied") != 200 || num("producer_retries") == 0 || num("outbox_kept_once") != num("producer_retries") {
		t.Errorf("effects %d; %d producer retries, %d kept once by the outbox", num("effects_applied"), num("producer_retries"), num("outbox_kept_once"))
	}
}

// TestDemoProducerOutboxNeedsServiceBus: --producer outbox on a broker
// without an outbox publisher in the demo is a usage error naming
// --broker servicebus.
func TestDemoProducerOutboxNeedsServiceBus(t *testing.T) {
	code, _, stderr := runCmd(t, "demo", "--producer", "outbox", "--messages", "10")
	if code == exitOK || !strings.Contains(stderr, "servicebus") {
		t.Fatalf("exit status %d, stderr %q; want a usage error naming --broker servicebus", code, stderr)
	}
}

// TestDemoServiceBusCosmos: idem demo --broker servicebus --store cosmos
// runs the scenario on the seed's own pair, an in-process Service Bus and
// an in-process Cosmos DB (cosmostest), two-phase, and holds the
// invariant.
func TestDemoServiceBusCosmos(t *testing.T) {
	code, out, stderr := runCmd(t, "demo", "--broker", "servicebus", "--store", "cosmos", "--json", "--messages", "120", "--seed", "8")
	if code != exitOK {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	rep := decode(t, out)
	if rep["invariant_ok"] != true || !strings.Contains(rep["store"].(string), "Cosmos DB") || rep["effects_applied"] != float64(120) {
		t.Fatalf("report: %v", rep)
	}
}
