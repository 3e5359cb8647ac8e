// Package integration holds broker/watermill's conformance runs: the
// broker/brokertest suite on the middleware over Watermill's GoChannel
// (here) and over watermill-sql on PostgreSQL (sqlpubsub), both through
// the suite package's brokertest Broker. They are a module of their own,
// which no library module requires, so that brokertest, internal/consumetest,
// watermill-sql and the PostgreSQL driver stay out of the module graph of
// every user of broker/watermill.
package integration
