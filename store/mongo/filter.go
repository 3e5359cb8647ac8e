package mongoidem

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
)

// ErrOperatorValue is the refusal of a value from the caller that the
// server would read as query syntax, not data: a document with a key that
// begins with "$" (at any depth, such as {"$gt": ""} decoded from a
// message's JSON into any), a regular expression or an array where an _id
// goes. It is wrapped in an *idem.InvalidDataError (permanent: the same
// value is refused on every retry).
var ErrOperatorValue = errors.New("mongoidem: the value would be read as a query operator")

// checkIDValue refuses an _id value from the caller that a filter
// {_id: v} would not match by equality. Documents whose keys begin with
// "$" are operators ({_id: {$gt: ""}} matches every string _id), a regular
// expression matches by pattern, and an array by element; none of them is
// an _id MongoDB stores, so refusing them takes nothing a caller could
// use. (Refusing keeps {_id: v} a plain equality, which FerretDB v1 finds
// through its index; {_id: {$eq: v}} it scans for.)
func checkIDValue(op string, v any) error {
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: v}})
	if err != nil {
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	val := bson.Raw(raw).Lookup("_id")
	switch val.Type {
	case bson.TypeRegex:
		return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("%w: an _id that is a regular expression", ErrOperatorValue)}
	case bson.TypeArray:
		return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("%w: an _id that is an array", ErrOperatorValue)}
	}
	if key := dollarKey(val); key != "" {
		return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("%w: an _id holding the key %q", ErrOperatorValue, key)}
	}
	return nil
}

// checkFieldNames refuses a document of fields to set whose top-level keys
// begin with "$": inside an update they are operators or refused by the
// server, and in an insert they are fields nobody could query by equality.
func checkFieldNames(op string, d bson.D) error {
	for _, el := range d {
		if strings.HasPrefix(el.Key, "$") {
			return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("%w: the field %q", ErrOperatorValue, el.Key)}
		}
	}
	return nil
}

// dollarKey is the first key beginning with "$" in v, searched through
// every embedded document and array, or "".
func dollarKey(v bson.RawValue) string {
	var elems []bson.RawElement
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, _ = v.Document().Elements()
	case bson.TypeArray:
		elems, _ = bson.Raw(v.Array()).Elements()
	case bson.TypeCodeWithScope:
		_, scope := v.CodeWithScope()
		elems, _ = scope.Elements()
	default:
		return ""
	}
	for _, el := range elems {
		if v.Type != bson.TypeArray && strings.HasPrefix(el.Key(), "$") {
			return el.Key()
		}
		if k := dollarKey(el.Value()); k != "" {
			return k
		}
	}
	return ""
}
