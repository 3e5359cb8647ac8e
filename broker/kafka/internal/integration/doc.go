// Package integration holds broker/kafka's tests on a Kafka cluster:
// franz-go's kfake, in the test process. The consumer's behaviour (order,
// held retries, commits, rebalances, dead letters, batch claims, replay,
// the ClientOptions client without a Consumer), the broker/brokertest
// conformance suite, the same cases while partition leadership moves
// (TestClusterLeadershipMoves), stream checkpoints on SQLite, PostgreSQL
// and MySQL, the running checkpoint example and the benchmarks. They are a
// module of their own, which no library module requires, so that kfake,
// kadm, brokertest and the SQL stores and drivers they use stay out of the
// module graph of every user of broker/kafka.
package integration
