// Package integration holds broker/servicebus's conformance runs: the
// broker/brokertest suite on the in-process Service Bus
// (servicebustest), with the plain and the session consumer. They are a
// module of their own, which no library module requires, so that
// brokertest and the stores it runs on stay out of the module graph of
// every user of broker/servicebus.
package integration
