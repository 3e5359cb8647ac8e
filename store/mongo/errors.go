package mongoidem

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/idemgo/idem"
)

// dataErrorCodes are the server's codes for a document or value it cannot
// take; retrying the same message would fail the same way.
var dataErrorCodes = []int{
	2,     // BadValue
	10334, // BSONObjectTooLarge
	17419, // a document grown past the limit by an update
	17420, // the same, older servers
	10003, // document too large after an in-place update (MMAPv1)
	52,    // DollarPrefixedFieldName
	56,    // EmptyFieldName
	57,    // DottedFieldName
	17280, // KeyTooLong (index key over the limit, servers before 4.2)
}

// wrap names the operation and classifies err: data the server refuses is
// an *idem.InvalidDataError (permanent); BSON encoding or decoding
// failures are too (the value or the stored document, not the server, is
// wrong); everything else (network, timeouts, not primary, write conflicts)
// is returned wrapped, retryable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ide *idem.InvalidDataError
	if errors.As(err, &ide) {
		return err
	}
	if isDataError(err) {
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	return fmt.Errorf("mongoidem: %s: %w", op, err)
}

func isDataError(err error) bool {
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range dataErrorCodes {
			if se.HasErrorCode(c) {
				return true
			}
		}
		return false
	}
	var (
		me  mongo.MarshalError
		de  *bson.DecodeError
		ve  bson.ValueDecoderError
		ee  bson.ValueEncoderError
		tle *tooLargeError
	)
	return errors.As(err, &me) || errors.As(err, &de) || errors.As(err, &ve) || errors.As(err, &ee) || errors.As(err, &tle)
}

// tooLargeError is a document over the server's size limit, refused before
// it is sent (some servers store it anyway, which the next read would fail
// on).
type tooLargeError struct {
	Size, Limit int
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("mongoidem: document of %d bytes is over the server's limit of %d", e.Size, e.Limit)
}

// hasCode reports whether err is a server error with one of codes.
func hasCode(err error, codes ...int) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}
