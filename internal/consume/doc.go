// Package consume holds the delivery plumbing shared by the broker
// adapters whose broker counts every redelivery toward a limit
// (broker/nats, broker/amqp). A Driver runs a delivery's broker.Handler
// under the guard and holds a delivery whose key is in progress elsewhere,
// claiming it again instead of handing it back to the broker (which would
// spend its delivery limit on a live duplicate); Decide builds the
// delivery's broker.Report; DeadLetterHeaders gives the idem headers of a
// dead letter.
//
// The handler types, the Report and the Hooks are the public broker
// package's: nothing here appears in an adapter's API.
package consume
