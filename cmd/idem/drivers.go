package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/idemgo/idem/cmd/idem/internal/chaos"
	"github.com/idemgo/idem/cmd/idem/internal/demo"
	"github.com/idemgo/idem/cmd/idem/internal/dlq"
)

// driver is one broker idem's tools run on: a row of drivers. Every tool
// that takes --broker finds the broker here, by the URL's scheme (or the
// short name of a server the tool runs itself), so a new broker is one row
// plus, for each tool, that tool's file for it (internal/dlq/<broker>.go
// for dead letters, replay and the doctor's horizon; internal/demo and
// internal/chaos for the demo and the chaos harness).
type driver struct {
	name    string   // for people: "Redis Streams"
	kind    string   // the short name --broker takes for a server the tool runs itself: "redisstream"
	schemes []string // URL schemes that name it (connStringScheme for a Service Bus connection string)
	form    string   // its --broker URL form, for --help
	about   string   // what the form names, for --help
	// dlq opens its dead letters: idem dlq list|show|replay, idem console
	// --broker, and idem doctor --broker (a queue that is a
	// dlq.Horizoner reads the settings that bound redelivery).
	dlq dlq.Opener
	// demo runs idem demo on it (nil: the demo has no transport for it
	// yet): on a server the demo runs itself (--broker KIND) or on the
	// user's (--broker URL), as demo.Broker says it can.
	demo *demo.Broker
	// chaos says the chaos harness runs on it (chaos.Config.Broker is its
	// kind; false: no chaos transport yet); chaosURL that it runs on the
	// user's server too (--broker URL), not only on its own (--broker KIND).
	chaos, chaosURL bool
}

// connStringScheme stands for a Service Bus connection string
// (Endpoint=sb://...), which has no URL scheme. An Event Hubs connection
// string has the same shape, so it is given after a prefix of its own,
// dlq.EventHubsPrefix (eventhubs:Endpoint=sb://...), whose scheme is
// eventHubsScheme: a bare connection string is always Service Bus's.
const (
	connStringScheme = "endpoint"
	eventHubsScheme  = "eventhubs"
)

// drivers is the table of brokers, in the order --help lists them.
var drivers = []driver{
	{name: "NATS JetStream", kind: "nats", schemes: []string{"nats", "tls"}, dlq: dlq.OpenNATS, demo: demo.NATS, chaos: true, chaosURL: true,
		form:  "nats://HOST:PORT?dlq=STREAM[&stream=S&consumer=C]",
		about: "the stream that holds the consumers' DeadLetterSubject; stream and\nconsumer name the consumed stream and durable (idem doctor)"},
	{name: "RabbitMQ", kind: "amqp", schemes: []string{"amqp", "amqps"}, dlq: dlq.OpenAMQP, demo: demo.AMQP, chaos: true, chaosURL: true,
		form:  "amqp://USER:PASS@HOST:PORT/VHOST?dlq=QUEUE[&queue=Q]   (also amqps://)",
		about: "the dead-letter queue the consumers' exchange routes to"},
	{name: "Kafka", kind: "kafka", schemes: []string{"kafka"}, dlq: dlq.OpenKafka, demo: demo.Kafka, chaos: true,
		form:  "kafka://HOST:PORT[,HOST:PORT]?dlq=TOPIC[&topic=T]",
		about: "the consumers' DeadLetterTopic; topic is the consumed one"},
	{name: "Azure Service Bus", kind: "servicebus", schemes: []string{connStringScheme}, dlq: dlq.OpenServiceBus, demo: demo.ServiceBus, chaos: true,
		form: "Endpoint=sb://NS.servicebus.windows.net/;SharedAccessKeyName=K;SharedAccessKey=S;EntityPath=ENTITY",
		about: "ENTITY is the queue, or TOPIC/Subscriptions/SUB, whose $DeadLetterQueue\n" +
			"is read (an Event Hubs connection string has this shape: prefix it with\n" +
			"eventhubs:, below)"},
	{name: "Azure Event Hubs", kind: "eventhubs", schemes: []string{eventHubsScheme}, dlq: dlq.OpenEventHubs, demo: demo.EventHubs, chaos: true,
		form: "eventhubs:Endpoint=sb://NS.servicebus.windows.net/;SharedAccessKeyName=K;SharedAccessKey=S;EntityPath=DLQHUB[;ConsumerGroup=G]",
		about: "an Event Hubs connection string after eventhubs: (without it, the same\n" +
			"string is Service Bus's); DLQHUB is the consumers' dead-letter hub\n" +
			"(Options.DeadLetter), read from every partition's earliest event through\n" +
			"consumer group G (default $Default), nothing checkpointed. A replay sends\n" +
			"the original to its hub; the dead letter stays (a hub cannot delete an\n" +
			"event). Retention is not readable over the Event Hubs protocol: idem\n" +
			"doctor says so; pass it as --redelivery-horizon"},
	{name: "Redis Streams", kind: "redisstream", schemes: []string{"redis", "rediss"}, dlq: dlq.OpenRedisStreams, demo: demo.RedisStreams, chaos: true, chaosURL: true,
		form:  "redis://[USER:PASS@]HOST:PORT[/DB]?dlq=STREAM[&stream=S&group=G]   (also rediss://)",
		about: "the consumers' DeadLetterStream; stream and group name the consumed\nstream and its consumer group (idem doctor)"},
	{name: "MQTT", kind: "mqtt", schemes: []string{"mqtt", "mqtts"}, dlq: dlq.OpenMQTT, demo: demo.MQTT, chaos: true, chaosURL: true,
		form: "mqtt://[USER:PASS@]HOST:PORT?dlq=TOPIC[&client=ID][&wait=1s]   (also mqtts://)",
		about: "the consumers' DeadLetterTopic, read through a persistent session of\n" +
			"its own, ID (default idem-dlq): MQTT keeps a message only for sessions\n" +
			"subscribed when it is published, so the first call subscribes it, says\n" +
			"so and lists nothing; run it once before the consumers dead-letter.\n" +
			"Replay acks in order: a dead letter behind one not replayed stays"},
	{name: "Amazon SQS", kind: "sqs", schemes: []string{"sqs"}, dlq: dlq.OpenSQS, demo: demo.SQS, chaos: true,
		form: "sqs://[HOST[:PORT]]?dlq=QUEUE[&queue=Q][&region=R]",
		about: "QUEUE is the consumers' DeadLetterQueueURL (a name or a URL), Q the\n" +
			"consumed queue (idem doctor); HOST the endpoint (plain HTTP on a\n" +
			"loopback address), AWS's for the region without one; credentials from\n" +
			"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN"},
	{name: "Google Cloud Pub/Sub", kind: "pubsub", schemes: []string{"pubsub"}, dlq: dlq.OpenPubSub, demo: demo.PubSub, chaos: true,
		form: "pubsub://PROJECT?dlq=SUBSCRIPTION[&subscription=S][&topic=T]",
		about: "a subscription of the dead-letter topic; S the consumed subscription\n" +
			"(idem doctor, and where a dead letter goes back), T that topic;\n" +
			"Application Default Credentials, or the emulator at PUBSUB_EMULATOR_HOST"},
}

// schemeOf is the scheme that picks raw's driver: the URL's, in lower
// case, connStringScheme for a Service Bus connection string, or
// eventHubsScheme for an Event Hubs one after dlq.EventHubsPrefix.
func schemeOf(raw string) (scheme string, u *url.URL, err error) {
	switch lower := strings.ToLower(raw); {
	case strings.HasPrefix(lower, "endpoint="):
		return connStringScheme, nil, nil
	case strings.HasPrefix(lower, dlq.EventHubsPrefix):
		return eventHubsScheme, nil, nil
	}
	u, err = url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("%w: %q: want %s", dlq.ErrBadURL, dlq.Redact(raw), brokerSchemes())
	}
	return strings.ToLower(u.Scheme), u, nil
}

// driverOf is the driver of a broker URL.
func driverOf(raw string) (*driver, *url.URL, error) {
	scheme, u, err := schemeOf(strings.TrimSpace(raw))
	if err != nil {
		return nil, nil, err
	}
	for i := range drivers {
		for _, s := range drivers[i].schemes {
			if s == scheme {
				return &drivers[i], u, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("%w: scheme %q: want %s", dlq.ErrBadURL, scheme, brokerSchemes())
}

// openQueue opens the dead letters a broker URL names.
func openQueue(ctx context.Context, raw string) (dlq.Queue, error) {
	raw = strings.TrimSpace(raw)
	d, u, err := driverOf(raw)
	if err != nil {
		return nil, err
	}
	return d.dlq(ctx, u, raw)
}

// brokerSchemes lists the URL forms the table takes, for an error.
func brokerSchemes() string {
	var s []string
	for _, d := range drivers {
		for _, sc := range d.schemes {
			if sc != connStringScheme && sc != eventHubsScheme {
				s = append(s, sc+"://")
			}
		}
	}
	return strings.Join(s, ", ") + ", a Service Bus connection string (Endpoint=sb://...;EntityPath=...)" +
		" or an Event Hubs one after eventhubs: (eventhubs:Endpoint=sb://...;EntityPath=DLQHUB)"
}

// brokerForms is the reference of broker URLs, as --help prints it.
func brokerForms() string {
	var b strings.Builder
	b.WriteString("Broker URLs (--broker or IDEM_BROKER):")
	for _, d := range drivers {
		fmt.Fprintf(&b, "\n  %s\n      %s: %s", d.form, d.name, strings.ReplaceAll(d.about, "\n", "\n      "))
	}
	b.WriteString("\n" + watermillNote)
	return b.String()
}

// watermillNote says why Watermill has no row, for --help.
const watermillNote = `Watermill has no row of its own: it runs over another broker's Pub/Sub, so
use the tools on the broker underneath (its URL or kind); its poison topic is
a topic there, whose dead letters carry idem's headers in Watermill's metadata.`

// driverByKind is the driver whose short name is kind, or nil.
func driverByKind(kind string) *driver {
	for i := range drivers {
		if drivers[i].kind == kind {
			return &drivers[i]
		}
	}
	return nil
}

// demoBroker reads idem demo's --broker: nothing (the embedded NATS), a
// driver's short name (a server the demo runs itself) or a URL (the
// user's server).
func demoBroker(arg string) (on *demo.Broker, url string, err error) {
	var names, urls []string
	for _, d := range drivers {
		if d.demo != nil && d.demo.InProcess() {
			names = append(names, d.kind)
		}
		if d.demo != nil && d.demo.TakesURL() {
			urls = append(urls, d.schemes[0]+"://...")
		}
	}
	want := fmt.Sprintf("want %s (a server the demo runs itself), or a URL of yours: %s", strings.Join(names, ", "), strings.Join(urls, ", "))
	if arg == "" {
		return demo.NATS, "", nil
	}
	if d := driverByKind(arg); d != nil {
		switch {
		case d.demo == nil:
			return nil, "", usagef("--broker %s: not supported by the demo yet (it has no %s transport); %s", arg, d.name, want)
		case !d.demo.InProcess():
			return nil, "", usagef("--broker %s: the demo runs %s on your server only: give its URL (%s)", arg, d.name, d.form)
		}
		return d.demo, "", nil
	}
	d, _, err := driverOf(arg)
	if err != nil {
		return nil, "", usagef("--broker %q: %s", dlq.Redact(arg), want)
	}
	switch {
	case d.demo == nil:
		return nil, "", usagef("--broker %s: not supported by the demo yet (it has no %s transport); %s", dlq.Redact(arg), d.name, want)
	case !d.demo.TakesURL():
		return nil, "", usagef("--broker: the demo runs %s in-process only (--broker %s); a server of yours is not supported yet", d.name, d.kind)
	}
	return d.demo, arg, nil
}

// chaosBroker reads idem chaos's --broker: a driver's short name (a server
// the harness runs itself) or a URL (the user's server), into cfg.
func chaosBroker(cfg *chaos.Config, arg string) error {
	var kinds, urls []string
	for _, d := range drivers {
		if d.chaos {
			kinds = append(kinds, d.kind)
		}
		if d.chaosURL {
			urls = append(urls, d.schemes[0]+"://")
		}
	}
	want := fmt.Sprintf("%s, or a %s URL", strings.Join(kinds, ", "), strings.Join(urls, ", "))
	if !strings.Contains(arg, "://") {
		d := driverByKind(arg)
		switch {
		case d == nil && (arg == "redis" || arg == "rediss"):
			return usagef("--broker %q: Redis Streams is --broker redisstream (or a redis:// URL)", arg)
		case d == nil:
			return usagef("--broker %q: want %s", arg, want)
		case !d.chaos:
			return usagef("--broker %s: the chaos harness has no %s transport yet; want %s", arg, d.name, want)
		}
		cfg.Broker = d.kind
		return nil
	}
	d, _, err := driverOf(arg)
	switch {
	case err != nil:
		return usagef("--broker %q: want %s", dlq.Redact(arg), want)
	case !d.chaos:
		return usagef("--broker %s: the chaos harness has no %s transport yet; want %s", dlq.Redact(arg), d.name, want)
	case !d.chaosURL:
		return usagef("--broker %s: %s runs on the harness's own in-process server (kfake, sqstest, pstest, servicebustest, eventhubstest): pass --broker %s", dlq.Redact(arg), d.name, d.kind)
	}
	cfg.Broker, cfg.BrokerURL = d.kind, arg
	return nil
}
