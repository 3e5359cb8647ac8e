package cosmos

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/idemgo/idem"
)

// statusOf is the HTTP status of a request the server answered with an
// error, 0 when err is not such an answer (a network failure, a timeout).
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// wrap names the operation and classifies err (the contract's answers,
// idem.ErrLeaseLost and idem.ErrNotFound, pass as they are): a write the server refuses
// as too large (413) or as invalid (400) is an *idem.InvalidDataError,
// permanent (the same record would be refused again); everything else
// (throttling after the client's retries, timeouts, an unreachable
// account) is returned wrapped, retryable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ide *idem.InvalidDataError
	if errors.As(err, &ide) || errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrNotFound) {
		return err
	}
	switch statusOf(err) {
	case http.StatusRequestEntityTooLarge, http.StatusBadRequest:
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	return fmt.Errorf("cosmos: %s: %w", op, err)
}

// ErrPartitionKey is wrapped by PartitionKeyError.
var ErrPartitionKey = errors.New("cosmos: the container's partition key is not the store's")

// PartitionKeyError reports a container partitioned by another path than
// PartitionKeyPath. A container's partition key cannot change: give the
// store another container (Options.Container), or move the records to a
// new one. Migrate and CheckSchema return it; it unwraps to
// ErrPartitionKey.
type PartitionKeyError struct {
	Container string   // database/container
	Paths     []string // the container's partition key paths
}

func (e *PartitionKeyError) Error() string {
	return fmt.Sprintf("cosmos: container %s is partitioned by %v; the store needs %s (a partition key cannot change: use another container)",
		e.Container, e.Paths, PartitionKeyPath)
}

// Unwrap returns ErrPartitionKey.
func (e *PartitionKeyError) Unwrap() error { return ErrPartitionKey }

// tooLargeError is a result that would take a record past Cosmos DB's
// item size limit, refused before it is sent.
type tooLargeError struct {
	Size, Limit int
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("cosmos: a result of %d bytes is over the store's limit of %d (items are at most 2 MB)", e.Size, e.Limit)
}
