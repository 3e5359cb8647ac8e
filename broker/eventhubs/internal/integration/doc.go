// Package integration holds broker/eventhubs's tests on the in-process
// Event Hubs (eventhubstest) with the unmodified azeventhubs client: the
// broker/brokertest conformance suite, Event Hubs' own cases (ownership
// moving between two Processors mid-stream, a producer's re-send, a
// consumer killed between the effect and the checkpoint), the checkpoint
// store and HandleCheckpoint on PostgreSQL, SQLite and MariaDB (two
// Processors balancing the partitions through it) and the benchmarks. They are a module of their own, which no library module
// requires, so that brokertest and the stores it runs on stay out of the
// module graph of every user of broker/eventhubs.
package integration
