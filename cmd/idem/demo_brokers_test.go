package main

import (
	"strings"
	"testing"

	"github.com/idemgo/idem/internal/testenv"
)

// TestDemoBrokers runs idem demo on each broker of the table the demo
// runs on beside NATS, RabbitMQ and Service Bus (tested on their own):
// SQS, Pub/Sub, Kafka and Event Hubs in process, Redis Streams and MQTT on
// the test servers; under heavy chaos every order is charged once, the
// naive consumer over-charges, crashes and restarts are on the record.
func TestDemoBrokers(t *testing.T) {
	for _, kind := range []string{"sqs", "pubsub", "kafka", "eventhubs", "redisstream", "mqtt"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each on a broker of its own, or on the run's streams and topics on the test servers
			switch kind {
			case "redisstream":
				kind = "redis://" + testenv.Redis.Need(t)
			case "mqtt":
				kind = "mqtt://" + testenv.MQTT.Need(t)
			}
			code, out, stderr := runCmd(t, "demo", "--broker", kind, "--json", "--messages", "100", "--consumers", "3",
				"--crash-rate", "0.1", "--dup-rate", "0.5", "--seed", "9")
			if code != exitOK {
				t.Fatalf("idem demo --broker %s: exit %d\n%s%s", kind, code, out, stderr)
			}
			rep := decode(t, out)
			num := func(k string) int { v, _ := rep[k].(float64); return int(v) }
			if rep["invariant_ok"] != true || num("effects_applied") != 100 || num("naive_overcharged") == 0 ||
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
		{"kafka://127.0.0.1:9092", "in-process only (--broker kafka)"},
		{"amqp", "on your server only"},
		{"redisstream", "on your server only"},
		{"mqtt", "on your server only"},
		{"sqs://127.0.0.1:9324?dlq=x", "in-process only (--broker sqs)"},
		{"Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s", "in-process only"},
		{"eventhubs:Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=orders", "in-process only (--broker eventhubs)"},
		{"http://x", "sqs"},
	} {
		code, _, stderr := runCmd(t, "demo", "--broker", tc.broker)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "SharedAccessKey=s") {
			t.Errorf("idem demo --broker %s: exit %d, want %d and %q\n%s", tc.broker, code, exitUsage, tc.want, stderr)
		}
	}
}

// A broker of the table without a demo transport (every one has one
// today) is refused by its short name and by its URL, naming the brokers
// the demo runs on.
func TestDemoBrokerWithoutTransport(t *testing.T) {
	saved := drivers
	defer func() { drivers = saved }()
	drivers = append([]driver(nil), saved...)
	d := driverByKind("kafka")
	d.demo = nil
	for _, arg := range []string{"kafka", "kafka://127.0.0.1:9092"} {
		_, _, err := demoBroker(arg)
		if err == nil || !strings.Contains(err.Error(), "not supported by the demo yet (it has no Kafka transport)") ||
			!strings.Contains(err.Error(), "eventhubs") || strings.Contains(err.Error(), "kafka,") {
			t.Errorf("demo --broker %s without a Kafka transport: %v", arg, err)
		}
	}
}
