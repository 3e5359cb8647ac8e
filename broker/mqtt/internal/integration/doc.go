// Package integration holds broker/mqtt's tests against the machine's
// Mosquitto (IDEM_MQTT_ADDR): the broker/brokertest conformance run and
// TestMosquittoRedelivery, which share the suite's broker harness. They are
// a module of their own, which no library module requires, so that
// brokertest, internal/consumetest and the SQLite store brokertest uses
// stay out of the module graph of every user of broker/mqtt. The package's
// Example stays in broker/mqtt.
package integration
