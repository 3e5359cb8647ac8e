package main

import (
	"strings"
	"testing"
)

// TestDemoBrokers runs idem demo on each broker the demo runs in process
// beside the embedded NATS (Service Bus has tests of its own), under
// heavy chaos: every order charged once, the naive consumer over-charging,
// crashes and restarts on the record.
func TestDemoBrokers(t *testing.T) {
	for _, kind := range []string{"sqs", "pubsub"} {
		t.Run(kind, func(t *testing.T) {
			code, out, stderr := runCmd(t, "demo", "--broker", kind, "--json", "--messages", "150", "--consumers", "3",
				"--crash-rate", "0.2", "--dup-rate", "0.5", "--seed", "9")
			if code != exitOK {
				t.Fatalf("idem demo --broker %s: exit %d\n%s%s", kind, code, out, stderr)
			}
			rep := decode(t, out)
			num := func(k string) int { v, _ := rep[k].(float64); return int(v) }
			if rep["invariant_ok"] != true || num("effects_applied") != 150 || num("naive_overcharged") == 0 ||
				num("crashes") == 0 || num("duplicates_suppressed") == 0 || num("conflicts") == 0 {
				t.Fatalf("idem demo --broker %s: %v", kind, rep)
			}
		})
	}
}

// Every --broker the demo cannot run says what it can: a broker of the
// table without a demo transport, an in-process broker given a URL, a
// scheme no driver has.
func TestDemoBrokerRefused(t *testing.T) {
	for _, tc := range []struct{ broker, want string }{
		{"kafka", "not supported by the demo yet (it has no Kafka transport)"},
		{"kafka://127.0.0.1:9092", "not supported by the demo yet (it has no Kafka transport)"},
		{"amqp", "on your server only"},
		{"sqs://127.0.0.1:9324?dlq=x", "in-process only (--broker sqs)"},
		{"Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s", "in-process only"},
		{"http://x", "sqs"},
	} {
		code, _, stderr := runCmd(t, "demo", "--broker", tc.broker)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "SharedAccessKey=s") {
			t.Errorf("idem demo --broker %s: exit %d, want %d and %q\n%s", tc.broker, code, exitUsage, tc.want, stderr)
		}
	}
}
