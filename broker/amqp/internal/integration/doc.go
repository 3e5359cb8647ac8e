// Package integration holds broker/amqp's tests against RabbitMQ: the
// broker/brokertest conformance run, the hold, lifecycle, delivery-limit,
// publish, replay and settle-action tests built on internal/consumetest,
// the benchmarks, and the queue worlds they share (setup_test.go). They are
// a module of their own, which no library module requires, so that
// brokertest, consumetest and the SQLite store brokertest uses stay out
// of the module graph of every user of broker/amqp. The package's Example
// and its message tests, which need neither, stay in broker/amqp.
package integration
