// Package outboxenv gives the outbox's integration tests their worlds: an
// isolated outbox on each database (outboxtest.Subject) and an isolated
// destination on each broker (outboxtest.Broker), found through
// internal/testenv and cleaned up when the test ends.
package outboxenv
