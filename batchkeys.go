package idem

import (
	"errors"
	"fmt"
)

// ErrDuplicateKeyInBatch means one batch (storekit.BatchStore's ClaimBatch, a store's
// batch of markers) named a key twice. The batch contract asks for
// distinct keys, and stores cannot honour a repeat the same way (one SQL
// statement cannot upsert a row twice), so every store refuses the whole
// batch before writing anything, with an *InvalidDataError that wraps this:
// errors.Is(err, ErrInvalidData) and IsPermanent hold, so a caller that
// retries on store errors does not retry it forever and Decide dead-letters
// it (reason invalid_data). Guard.ClaimBatch never sends a repeat: it
// claims a repeated key in its own turn, as the duplicate it is.
var ErrDuplicateKeyInBatch = errors.New("idem: key repeated in one batch")

// checkBatchKeys is storekit.CheckBatchKeys, which stores call first in
// their batch operations, for ClaimBatch over a store without one.
func checkBatchKeys(op string, reqs []ClaimRequest) error {
	if len(reqs) < 2 || checkedBatch(reqs) {
		return nil
	}
	seen := make(map[Key]int, len(reqs))
	for i, r := range reqs {
		if j, dup := seen[r.Key]; dup {
			return &InvalidDataError{Op: op, Err: fmt.Errorf("%w: %s at positions %d and %d", ErrDuplicateKeyInBatch, r.Key, j, i)}
		}
		seen[r.Key] = i
	}
	return nil
}
