// Package integration holds broker/pubsub's tests on pstest, the client
// library's in-process Pub/Sub server, through the real client over gRPC:
// the broker/brokertest conformance runs, with and without exactly-once
// delivery, the lifecycle tests (a refused ack, a lost MaxExtension, held
// deliveries keeping their deadlines through a store outage), and
// the topic and subscription worlds they share. They are a module of their
// own, which no library module requires, so that brokertest,
// internal/consumetest and the SQLite store brokertest uses stay out of the
// module graph of every user of broker/pubsub. The package's Examples and
// its attribute tests, which need neither, stay in broker/pubsub.
package integration
