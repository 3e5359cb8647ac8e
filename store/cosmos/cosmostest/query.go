package cosmostest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Page sizes of a query: without x-ms-max-item-count, and at most (the
// service's "dynamic" page, -1, is this many too).
const (
	defaultPageSize = 100
	maxPageSize     = 1000
	maxPageBytes    = 4 << 20
)

// crossPartitionRefusal is the gateway's answer to a cross-partition query
// it cannot serve without the client's query pipeline, which azcosmos v1
// does not have.
const crossPartitionRefusal = "The provided cross partition query can not be directly served by the gateway. " +
	"This is a first chance (internal) exception that all newer clients will know how to handle gracefully. " +
	"(cosmostest, as the gateway: a query without a partition key may not have ORDER BY, TOP, OFFSET LIMIT or aggregates)"

// query serves a query of a container's items.
func (s *Server) query(r *http.Request, c *container, body []byte) response {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/query+json") {
		return errorResponse(http.StatusBadRequest, "A query's Content-Type is application/query+json, not "+ct)
	}
	var qb struct {
		Query      string `json:"query"`
		Parameters []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(body, &qb); err != nil {
		return errorResponse(http.StatusBadRequest, "The query body is not valid JSON: "+err.Error())
	}
	q, err := parseQuery(qb.Query)
	if err != nil {
		return queryError(err)
	}
	params := map[string]any{}
	for _, p := range qb.Parameters {
		dec := json.NewDecoder(bytes.NewReader(p.Value))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil && len(p.Value) > 0 {
			return errorResponse(http.StatusBadRequest, fmt.Sprintf("The value of the parameter %s is not JSON: %v", p.Name, err))
		}
		if len(p.Value) == 0 {
			v = undefined
		}
		params[p.Name] = v
	}
	for name := range q.params {
		if _, ok := params[name]; !ok {
			return errorResponse(http.StatusBadRequest, fmt.Sprintf("The query parameter %s is not defined", name))
		}
	}
	pk, single, err := pkHeader(r)
	if err != nil {
		return errorResponse(http.StatusBadRequest, err.Error())
	}
	if !single {
		if !strings.EqualFold(r.Header.Get("x-ms-documentdb-query-enablecrosspartition"), "true") {
			return errorResponse(http.StatusBadRequest, "Cross partition query is required but disabled. Please set x-ms-documentdb-query-enablecrosspartition to true, specify x-ms-documentdb-partitionkey, or revise your query to avoid this exception.")
		}
		if len(q.orderBy) > 0 || q.top != nil || q.limit != nil || q.count {
			resp := errorResponse(http.StatusBadRequest, crossPartitionRefusal)
			resp.header.Set("x-ms-substatus", "1004")
			return resp
		}
	}
	if len(q.orderBy) > 1 {
		paths := make([]compositePath, len(q.orderBy))
		for i, o := range q.orderBy {
			paths[i] = compositePath{path: "/" + strings.Join(o.path.props, "/"), desc: o.desc}
		}
		if !c.hasComposite(paths) {
			return errorResponse(http.StatusBadRequest, "The order by query does not have a corresponding composite index that it can be served from.")
		}
	}
	results, err := s.run(c, q, params, pk, single)
	if err != nil {
		return queryError(err)
	}
	return s.page(r, c, body, pk, results)
}

// queryError answers a query the parser refused.
func queryError(err error) response {
	var u *unmodelled
	if errors.As(err, &u) {
		return errorResponse(http.StatusBadRequest, u.Error())
	}
	return errorResponse(http.StatusBadRequest, err.Error())
}

// run evaluates q over the container's live items (one partition's when
// single), in the order a feed has them: by partition, then by creation.
func (s *Server) run(c *container, q *query, params map[string]any, pk string, single bool) ([]any, error) {
	now := s.now()
	var items []*item
	collect := func(pk string) {
		for id, it := range c.parts[pk] {
			if c.expired(it, now) {
				delete(c.parts[pk], id)
				continue
			}
			items = append(items, it)
		}
	}
	if single {
		collect(pk)
	} else {
		for pk := range c.parts {
			collect(pk)
		}
	}
	slices.SortFunc(items, func(a, b *item) int {
		if a.pk != b.pk {
			ha, hb := pkHash(a.pk), pkHash(b.pk)
			if ha != hb {
				return int(int64(ha) - int64(hb))
			}
			return strings.Compare(a.pk, b.pk)
		}
		return int(a.seq - b.seq)
	})
	e := &env{params: params}
	type row struct {
		doc  map[string]any
		keys []any
	}
	var rows []row
	for _, it := range items {
		e.doc = c.doc(it)
		if q.where != nil && !truthy(q.where.eval(e)) {
			continue
		}
		rw := row{doc: e.doc}
		for _, o := range q.orderBy {
			rw.keys = append(rw.keys, o.path.eval(e))
		}
		rows = append(rows, rw)
	}
	if q.count {
		return []any{len(rows)}, nil
	}
	if len(q.orderBy) > 0 {
		slices.SortStableFunc(rows, func(a, b row) int {
			for i, o := range q.orderBy {
				if c := sortCompare(a.keys[i], b.keys[i]); c != 0 {
					if o.desc {
						return -c
					}
					return c
				}
			}
			return 0
		})
	}
	count := func(x expr) (int, error) {
		f, ok := x.eval(e).(float64)
		if !ok || f < 0 || f != float64(int(f)) {
			return 0, fmt.Errorf("TOP, OFFSET and LIMIT take non-negative integers")
		}
		return int(f), nil
	}
	if q.offset != nil {
		off, err := count(q.offset)
		if err != nil {
			return nil, err
		}
		lim, err := count(q.limit)
		if err != nil {
			return nil, err
		}
		rows = rows[min(off, len(rows)):]
		rows = rows[:min(lim, len(rows))]
	}
	if q.top != nil {
		n, err := count(q.top)
		if err != nil {
			return nil, err
		}
		rows = rows[:min(n, len(rows))]
	}
	out := make([]any, len(rows))
	for i, rw := range rows {
		if q.star {
			out[i] = rw.doc
			continue
		}
		m := map[string]any{}
		e.doc = rw.doc
		for _, f := range q.fields {
			if v := f.path.eval(e); v != undefined {
				m[f.name] = v
			}
		}
		out[i] = m
	}
	return out, nil
}

// pkHash orders partitions in a cross-partition feed, as Cosmos DB orders
// them by the hash of their key.
func pkHash(pk string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(pk))
	return h.Sum32()
}

// page answers one page of results, from the continuation the request
// carries, with the continuation of the next page when there is one.
func (s *Server) page(r *http.Request, c *container, body []byte, pk string, results []any) response {
	sum := sha256.Sum256(append(append([]byte(pk), 0), body...))
	fp := base64.RawURLEncoding.EncodeToString(sum[:9])
	skip := 0
	if tok := r.Header.Get("x-ms-continuation"); tok != "" {
		f, n, ok := strings.Cut(tok, ":")
		var err error
		if skip, err = strconv.Atoi(n); !ok || f != fp || err != nil || skip < 0 {
			return errorResponse(http.StatusBadRequest, "The continuation token "+tok+" is not one of this query's")
		}
	}
	size := defaultPageSize
	if h := r.Header.Get("x-ms-max-item-count"); h != "" {
		n, err := strconv.Atoi(h)
		switch {
		case err != nil || n == 0 || n < -1:
			return errorResponse(http.StatusBadRequest, "Invalid value for x-ms-max-item-count: "+h)
		case n == -1 || n > maxPageSize:
			size = maxPageSize
		default:
			size = n
		}
	}
	docs := []any{}
	bytes := 0
	i := min(skip, len(results))
	for ; i < len(results) && len(docs) < size; i++ {
		b, _ := json.Marshal(results[i])
		if len(docs) > 0 && bytes+len(b) > maxPageBytes {
			break
		}
		bytes += len(b)
		docs = append(docs, results[i])
	}
	resp := jsonResponse(http.StatusOK, map[string]any{"_rid": c.rid, "Documents": docs, "_count": len(docs)})
	resp.header.Set("x-ms-item-count", strconv.Itoa(len(docs)))
	if i < len(results) {
		resp.header.Set("x-ms-continuation", fp+":"+strconv.Itoa(i))
	}
	resp.charge = queryCharge(bytes)
	return resp
}
