// Package integration holds the outbox's tests against real databases and
// brokers: each publisher against its broker through idem's consumer for it,
// each outbox store on its database, the relay matrix (every store × every
// broker) and the relay benchmarks. It is a module of its own, required by
// no other, so that the stores, broker adapters and test servers these tests
// need stay out of the outbox module's requirements, and out of the module
// graph of every program that imports the outbox.
package integration
