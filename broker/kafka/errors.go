package kafka

import (
	"errors"
	"fmt"
)

// ErrNotDeadLetter means Replay or DeadLetterOf was given a record that is
// not a dead letter of this package: it has no Idem-Original-Topic header.
var ErrNotDeadLetter = errors.New("kafka: not a dead letter (no " + HeaderOriginalTopic + " header)")

// ErrClientConfig means the *kgo.Client given to NewConsumer lacks a setting
// the consumer relies on (a consumer group, ClientOptions). The error says
// which one.
var ErrClientConfig = errors.New("kafka: client not configured for idem")

// ErrRunning means Run was called on a consumer that has run already. A Consumer runs once; build a new one (on a new client) to
// restart.
var ErrRunning = errors.New("kafka: consumer already ran")

// CommitError reports an offset commit that failed. Nothing is lost: the
// records after the last committed offset are redelivered and the store
// skips those already done.
type CommitError struct {
	Offsets map[string]map[int32]int64 // what was being committed: topic, partition, next offset
	Err     error
}

// Error names the offsets that were not committed.
func (e *CommitError) Error() string {
	return fmt.Sprintf("kafka: commit offsets %v: %v", e.Offsets, e.Err)
}

// Unwrap returns the client's error.
func (e *CommitError) Unwrap() error { return e.Err }

// DeadLetterError reports a dead letter that could not be produced. The
// original record is held and retried after a back-off: it is never
// committed before its dead letter is acknowledged.
type DeadLetterError struct {
	Topic     string // the original record's topic
	Partition int32
	Offset    int64
	Reason    string // the Idem-Reason header value
	Err       error
}

// Error names the record that could not be dead-lettered and why.
func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("kafka: dead-letter %s/%d@%d (%s): %v", e.Topic, e.Partition, e.Offset, e.Reason, e.Err)
}

// Unwrap returns the produce error.
func (e *DeadLetterError) Unwrap() error { return e.Err }
