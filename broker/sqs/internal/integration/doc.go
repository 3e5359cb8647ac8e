// Package integration holds broker/sqs's tests on sqstest, the in-process
// SQS, through the real aws-sdk-go-v2 client: the broker/brokertest
// conformance runs on a standard and on a FIFO queue, the consumer and
// producer tests, and the queue worlds they share (the server, the client
// and the HTTP client Kill cuts off). They are a module of their own, which
// no library module requires, so that brokertest, internal/consumetest and
// the SQLite store brokertest uses stay out of the module graph of every
// user of broker/sqs. The package's Example, its option checks and
// sqstest's own tests, which need neither, stay in broker/sqs.
package integration
