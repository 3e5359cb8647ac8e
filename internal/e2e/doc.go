// Package e2e measures what idem costs a real consumer end to end, beside
// the same consumer written by hand without it: a Kafka (kfake), NATS
// JetStream or RabbitMQ consumer writing one business row per message to
// PostgreSQL, with the same concurrency and the same transactions per
// message on both sides. TestE2E checks every side on a few messages;
// BenchmarkE2E measures each side alone (for profiles) and
// BenchmarkE2ERatio the pairs, interleaved. BENCH.md has the figures and
// the commands.
package e2e
