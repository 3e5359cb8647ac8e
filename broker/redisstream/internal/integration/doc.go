// Package integration holds broker/redisstream's broker/brokertest
// conformance run against the machine's Redis. It is a module of its own,
// which no library module requires, so that brokertest, internal/consumetest
// and the SQLite store brokertest uses stay out of the module graph of
// every user of broker/redisstream. The package's Example stays in
// broker/redisstream.
package integration
