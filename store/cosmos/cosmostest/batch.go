package cosmostest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// maxBatchOps is Cosmos DB's limit on the operations of a transactional
// batch.
const maxBatchOps = 100

// batchOp is one operation of a transactional batch, as the client sends
// it.
type batchOp struct {
	OperationType string          `json:"operationType"`
	ID            *string         `json:"id"`
	IfMatch       *string         `json:"ifMatch"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

// batchResult is one operation's answer.
type batchResult struct {
	StatusCode    int             `json:"statusCode"`
	RequestCharge float64         `json:"requestCharge"`
	ETag          string          `json:"eTag,omitempty"`
	ResourceBody  json.RawMessage `json:"resourceBody,omitempty"`
}

// staged is a batch's view of its partition: the items it has written
// (nil: deleted) over the stored ones, committed only when every
// operation succeeds.
type staged struct {
	s       *Server
	c       *container
	pk      string
	written map[string]*item
}

func (v *staged) get(id string) *item {
	if it, ok := v.written[id]; ok {
		return it
	}
	return v.s.lookup(v.c, v.pk, id)
}

// batch serves a transactional batch: operations on items of one logical
// partition (the request's partition key), applied in order, all or none.
// On success every operation's result comes with 200; when one fails,
// nothing is written and the answer is 207 with that operation's status
// and 424 (failed dependency) for every other.
func (s *Server) batch(r *http.Request, c *container, body []byte) response {
	if !strings.EqualFold(r.Header.Get("x-ms-cosmos-batch-atomic"), "true") {
		return notModelled("non-atomic batches (bulk)")
	}
	pk, ok, err := pkHeader(r)
	switch {
	case err != nil:
		return errorResponse(http.StatusBadRequest, err.Error())
	case !ok:
		return errorResponse(http.StatusBadRequest, "A transactional batch needs the partition key of its logical partition (header x-ms-documentdb-partitionkey).")
	}
	var ops []batchOp
	if err := json.Unmarshal(body, &ops); err != nil {
		return errorResponse(http.StatusBadRequest, "The batch body is not a JSON array of operations: "+err.Error())
	}
	if len(ops) == 0 || len(ops) > maxBatchOps {
		return errorResponse(http.StatusBadRequest, fmt.Sprintf("A transactional batch has 1 to %d operations, not %d", maxBatchOps, len(ops)))
	}
	minimal := strings.EqualFold(r.Header.Get("Prefer"), "return=minimal")
	v := &staged{s: s, c: c, pk: pk, written: map[string]*item{}}
	results := make([]batchResult, len(ops))
	for i, op := range ops {
		res, resp, ok := s.batchOp(r, v, op)
		if !ok {
			for j := range results {
				results[j] = batchResult{StatusCode: http.StatusFailedDependency}
			}
			results[i] = batchResult{StatusCode: resp.status, RequestCharge: resp.charge}
			out := jsonResponse(http.StatusMultiStatus, results)
			out.charge = resp.charge
			if resp.unmodelled {
				return resp // refused outright, as everything it does not model
			}
			return out
		}
		if minimal && op.OperationType != "Read" {
			res.ResourceBody = nil
		}
		results[i] = res
	}
	total := 0.0
	for id, it := range v.written {
		if it == nil {
			delete(c.parts[pk], id)
			continue
		}
		c.store(it)
	}
	for _, res := range results {
		total += res.RequestCharge
	}
	out := jsonResponse(http.StatusOK, results)
	out.charge = total
	return out
}

// batchOp applies one operation to the staged view.
func (s *Server) batchOp(r *http.Request, v *staged, op batchOp) (batchResult, response, bool) {
	fail := func(resp response) (batchResult, response, bool) { return batchResult{}, resp, false }
	done := func(status int, it *item, charge float64) (batchResult, response, bool) {
		res := batchResult{StatusCode: status, RequestCharge: charge}
		if it != nil {
			res.ETag = it.etag
			res.ResourceBody, _ = json.Marshal(v.c.doc(it))
		}
		return res, response{}, true
	}
	id := ""
	if op.ID != nil {
		id = *op.ID
	}
	var cur *item
	switch op.OperationType {
	case "Create", "Upsert":
		if op.IfMatch != nil {
			return fail(notModelled("If-Match on a batch's %s", strings.ToLower(op.OperationType)))
		}
	case "Read", "Delete", "Replace", "Patch":
		if cur = v.get(id); cur == nil {
			return fail(errorResponse(http.StatusNotFound, "Entity with the specified id does not exist in the system., "+id))
		}
		if op.IfMatch != nil && *op.IfMatch != "*" && *op.IfMatch != cur.etag {
			return fail(errorResponse(http.StatusPreconditionFailed, "Operation cannot be performed because one of the specified precondition is not met"))
		}
	default:
		return fail(notModelled("the batch operation %q", op.OperationType))
	}
	switch op.OperationType {
	case "Read":
		return done(http.StatusOK, cur, readCharge(v.c.doc(cur)))
	case "Delete":
		v.written[id] = nil
		s.lsn++
		return done(http.StatusNoContent, nil, writeCharge(0))
	case "Patch":
		next, resp, ok := patched(v.c, cur, op.ResourceBody)
		if !ok {
			return fail(resp)
		}
		return v.write(next, http.StatusOK)
	}
	it, resp, ok := parseItem(r, v.c, op.ResourceBody)
	if !ok {
		return fail(resp)
	}
	old := v.get(it.id)
	status := http.StatusCreated
	switch op.OperationType {
	case "Create":
		if old != nil {
			return fail(errorResponse(http.StatusConflict, "Entity with the specified id already exists in the system., "+it.id))
		}
	case "Upsert":
		if old != nil {
			status = http.StatusOK
		}
	case "Replace":
		if it.id != id {
			return fail(errorResponse(http.StatusBadRequest, fmt.Sprintf("The id of the item in the body, %q, is not the one of the operation, %q", it.id, id)))
		}
		status = http.StatusOK
	}
	if old != nil {
		it.rid, it.seq = old.rid, old.seq
	}
	return v.write(it, status)
}

// write stages it.
func (v *staged) write(it *item, status int) (batchResult, response, bool) {
	v.s.stamp(v.c, it)
	v.written[it.id] = it
	b, _ := json.Marshal(v.c.doc(it))
	return batchResult{StatusCode: status, RequestCharge: writeCharge(len(b)), ETag: it.etag, ResourceBody: b}, response{}, true
}
