package cosmostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// maxPatchOps is Cosmos DB's limit on the operations of one patch.
const maxPatchOps = 10

type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
	From  string          `json:"from"`
}

// patch applies a partial update to it: every operation or none, and
// none unless the condition (if any) holds on the item as it is.
func (s *Server) patch(r *http.Request, c *container, it *item, body []byte) response {
	next, resp, ok := patched(c, it, body)
	if !ok {
		return resp
	}
	s.put(c, next)
	n, _ := json.Marshal(next.body)
	return s.itemResponse(r, c, next, http.StatusOK, writeCharge(len(n)))
}

// patched returns it as body's patch leaves it (not yet stored), or the
// answer that refuses the patch.
func patched(c *container, it *item, body []byte) (*item, response, bool) {
	refuse := func(resp response) (*item, response, bool) { return nil, resp, false }
	var pb struct {
		Condition  *string   `json:"condition"`
		Operations []patchOp `json:"operations"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&pb); err != nil {
		return refuse(errorResponse(http.StatusBadRequest, "The patch body is not valid JSON: "+err.Error()))
	}
	if n := len(pb.Operations); n == 0 || n > maxPatchOps {
		return refuse(errorResponse(http.StatusBadRequest, fmt.Sprintf("A patch has 1 to %d operations, not %d", maxPatchOps, n)))
	}
	if pb.Condition != nil {
		q, err := parseCondition(*pb.Condition)
		if err != nil {
			return refuse(queryError(err))
		}
		if !truthy(q.where.eval(&env{doc: c.doc(it)})) {
			return refuse(errorResponse(http.StatusPreconditionFailed, "Precondition for the patch not met: "+*pb.Condition))
		}
	}
	doc, err := deepCopy(it.body)
	if err != nil {
		return refuse(errorResponse(http.StatusInternalServerError, err.Error()))
	}
	for _, op := range pb.Operations {
		if resp, ok := applyOp(c, doc, op); !ok {
			return refuse(resp)
		}
	}
	if _, _, err := ttlOf(doc); err != nil {
		return refuse(errorResponse(http.StatusBadRequest, err.Error()))
	}
	n, _ := json.Marshal(doc)
	if len(n) > maxItemSize {
		return refuse(errorResponse(http.StatusRequestEntityTooLarge, fmt.Sprintf("Request size is too large: the patched item is %d bytes, over %d", len(n), maxItemSize)))
	}
	return &item{id: it.id, pk: it.pk, body: doc, rid: it.rid, seq: it.seq}, response{}, true
}

// applyOp applies one operation to doc.
func applyOp(c *container, doc map[string]any, op patchOp) (response, bool) {
	bad := func(format string, args ...any) (response, bool) {
		return errorResponse(http.StatusBadRequest, fmt.Sprintf(format, args...)), false
	}
	parts, err := splitPath(op.Path)
	if err != nil {
		return bad("The patch path %q is not valid: %v", op.Path, err)
	}
	for _, p := range parts {
		if isIndex(p) {
			return notModelled("patches of array elements (%s)", op.Path), false
		}
	}
	switch {
	case op.Path == "/id":
		return bad("A patch cannot change the item's id")
	case op.Path == c.pkPath || strings.HasPrefix(c.pkPath, op.Path+"/"):
		return bad("A patch cannot change the item's partition key (%s)", c.pkPath)
	case len(parts) == 1 && strings.HasPrefix(parts[0], "_") && isSystemProp(parts[0]):
		return bad("A patch cannot change the system property %s", parts[0])
	}
	parent := doc
	for _, p := range parts[:len(parts)-1] {
		m, ok := parent[p].(map[string]any)
		if !ok {
			return bad("The patch path %s does not exist in the item", op.Path)
		}
		parent = m
	}
	name := parts[len(parts)-1]
	_, exists := parent[name]
	var val any
	if op.Op != "remove" {
		if len(op.Value) == 0 {
			return bad("The patch operation %s of %s has no value", op.Op, op.Path)
		}
		dec := json.NewDecoder(bytes.NewReader(op.Value))
		dec.UseNumber()
		if err := dec.Decode(&val); err != nil {
			return bad("The value of the patch operation on %s is not JSON", op.Path)
		}
	}
	switch op.Op {
	case "add", "set":
		parent[name] = val
	case "replace":
		if !exists {
			return bad("The patch path %s does not exist in the item (replace)", op.Path)
		}
		parent[name] = val
	case "remove":
		if !exists {
			return bad("The patch path %s does not exist in the item (remove)", op.Path)
		}
		delete(parent, name)
	case "incr":
		by, ok := val.(json.Number)
		if !ok {
			return bad("An incr takes a number")
		}
		if !exists {
			parent[name] = by
			break
		}
		cur, ok := parent[name].(json.Number)
		if !ok {
			return bad("An incr applies to a number; %s is not one", op.Path)
		}
		if a, err1 := cur.Int64(); err1 == nil {
			if b, err2 := by.Int64(); err2 == nil {
				parent[name] = json.Number(fmt.Sprint(a + b))
				break
			}
		}
		a, _ := cur.Float64()
		b, _ := by.Float64()
		parent[name] = json.Number(fmt.Sprint(a + b))
	case "move":
		return notModelled("the patch operation move"), false
	default:
		return bad("The patch operation %q is not one of add, set, replace, remove, incr, move", op.Op)
	}
	return response{}, true
}

func isIndex(p string) bool {
	if p == "-" {
		return true
	}
	for _, r := range p {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isSystemProp(p string) bool {
	for _, s := range systemProps {
		if s == p {
			return true
		}
	}
	return false
}

// deepCopy copies a decoded JSON object, numbers kept as written.
func deepCopy(m map[string]any) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return decodeObject(b)
}
