// Package integration holds broker/nats's tests: the broker/brokertest
// conformance run on the machine's NATS server and on a three-node
// JetStream cluster the test starts itself (TestClusterNodeKilled), the
// hold, lifecycle, publish, replay, advisory and settle-action tests built
// on internal/consumetest, the benchmarks, and the JetStream test worlds
// they share (setup_test.go). They are a module of their own, which no
// library module requires, so that brokertest, consumetest and the SQLite
// store brokertest uses stay out of the module graph of every user of
// broker/nats. The package's Example stays in broker/nats.
package integration
