package cosmostest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// item is one stored item.
type item struct {
	id   string
	pk   string         // canonical partition key (container.pkOf)
	body map[string]any // the user's properties, system properties removed
	rid  string
	etag string
	ts   time.Time // the last write, by the server's clock
	seq  int64     // the container's insertion counter at its creation
}

// systemProps are the properties the server writes; a client's values for
// them are dropped on write.
var systemProps = []string{"_rid", "_self", "_etag", "_attachments", "_ts", "_lsn"}

// doc renders the item as the server returns it.
func (c *container) doc(it *item) map[string]any {
	m := make(map[string]any, len(it.body)+5)
	for k, v := range it.body {
		m[k] = v
	}
	m["_rid"] = it.rid
	m["_self"] = "dbs/" + c.db.rid + "/colls/" + c.rid + "/docs/" + it.rid + "/"
	m["_etag"] = it.etag
	m["_attachments"] = "attachments/"
	m["_ts"] = it.ts.Unix()
	return m
}

// ttlOf reads an item's ttl property: set reports whether it has one.
func ttlOf(body map[string]any) (ttl int64, set bool, err error) {
	v, ok := body["ttl"]
	if !ok || v == nil {
		return 0, false, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, false, fmt.Errorf("The value of the item's ttl, %v, is not a number", v)
	}
	i, err := n.Int64()
	if err != nil || (i != -1 && i < 1) || i > 1<<31-1 {
		return 0, false, fmt.Errorf("The value of the item's ttl, %v, is not valid: it is -1 or a number of seconds from 1 to 2147483647", v)
	}
	return i, true, nil
}

// expired reports whether it has outlived its time to live at now: the
// item's ttl, else the container's default; none when the container has
// no default (then item ttls are ignored, as Cosmos DB ignores them).
func (c *container) expired(it *item, now time.Time) bool {
	if c.defaultTTL == nil {
		return false
	}
	ttl := *c.defaultTTL
	if t, set, _ := ttlOf(it.body); set {
		ttl = t
	}
	return ttl > 0 && !now.Before(it.ts.Add(time.Duration(ttl)*time.Second))
}

// lookup returns the live item id in partition pk, removing it when it has
// expired. Callers hold s.mu.
func (s *Server) lookup(c *container, pk, id string) *item {
	it := c.parts[pk][id]
	if it != nil && c.expired(it, s.now()) {
		delete(c.parts[pk], id)
		return nil
	}
	return it
}

// put stores it (new or replacing) with a new etag and timestamp.
func (s *Server) put(c *container, it *item) {
	s.stamp(c, it)
	c.store(it)
}

// stamp gives it a new etag and timestamp, and an identity when it is new.
func (s *Server) stamp(c *container, it *item) {
	it.etag, it.ts = s.etag(), s.now()
	if it.rid == "" {
		it.rid = newRID()
		c.seq++
		it.seq = c.seq
	}
}

// store places it in its partition.
func (c *container) store(it *item) {
	p := c.parts[it.pk]
	if p == nil {
		p = map[string]*item{}
		c.parts[it.pk] = p
	}
	p[it.id] = it
}

// parseItem reads an item body for a write to the partition the request
// names, and checks it.
func parseItem(r *http.Request, c *container, body []byte) (*item, response, bool) {
	bad := func(status int, msg string) (*item, response, bool) { return nil, errorResponse(status, msg), false }
	hpk, ok, err := pkHeader(r)
	switch {
	case err != nil:
		return bad(http.StatusBadRequest, err.Error())
	case !ok:
		return bad(http.StatusBadRequest, "PartitionKey value must be supplied for this operation (header x-ms-documentdb-partitionkey).")
	}
	m, err := decodeObject(body)
	if err != nil {
		return bad(http.StatusBadRequest, err.Error())
	}
	for _, p := range systemProps {
		delete(m, p)
	}
	id, isString := m["id"].(string)
	if _, has := m["id"]; has && !isString {
		return bad(http.StatusBadRequest, "The item's id is not a string")
	}
	if err := checkID("item", id); err != nil {
		return bad(http.StatusBadRequest, err.Error())
	}
	pk, err := c.pkOf(m)
	if err != nil {
		return bad(http.StatusBadRequest, err.Error())
	}
	if pk != hpk {
		return bad(http.StatusBadRequest, fmt.Sprintf("PartitionKey extracted from document (%s at %s) doesn't match the one specified in the header (%s).", pk, c.pkPath, hpk))
	}
	if _, _, err := ttlOf(m); err != nil {
		return bad(http.StatusBadRequest, err.Error())
	}
	return &item{id: id, pk: pk, body: m}, response{}, true
}

// refuseOptions refuses the request headers of item operations it does
// not model.
func refuseOptions(r *http.Request) (response, bool) {
	for _, h := range []string{"x-ms-documentdb-pre-trigger-include", "x-ms-documentdb-post-trigger-include"} {
		if r.Header.Get(h) != "" {
			return notModelled("triggers (%s)", h), true
		}
	}
	if v := r.Header.Get("x-ms-indexing-directive"); v != "" {
		return notModelled("indexing directives (x-ms-indexing-directive: %s)", v), true
	}
	return response{}, false
}

// docsFeed serves POST to a container's items: create, upsert, query.
func (s *Server) docsFeed(r *http.Request, c *container, body []byte) response {
	if resp, refused := refuseOptions(r); refused {
		return resp
	}
	switch {
	case r.Method != http.MethodPost:
		return notModelled("%s of a container's item feed (read feed, change feed)", r.Method)
	case isQuery(r):
		return s.query(r, c, body)
	case strings.EqualFold(r.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
		return s.batch(r, c, body)
	}
	it, resp, ok := parseItem(r, c, body)
	if !ok {
		return resp
	}
	old := s.lookup(c, it.pk, it.id)
	status := http.StatusCreated
	if strings.EqualFold(r.Header.Get("x-ms-documentdb-is-upsert"), "true") {
		if r.Header.Get("If-Match") != "" {
			return notModelled("If-Match on an upsert")
		}
		if old != nil {
			it.rid, it.seq, status = old.rid, old.seq, http.StatusOK
		}
	} else if old != nil {
		return errorResponse(http.StatusConflict, "Entity with the specified id already exists in the system., "+it.id)
	}
	s.put(c, it)
	return s.itemResponse(r, c, it, status, writeCharge(len(body)))
}

// itemResponse answers a write or read with the item, or without it when
// the client prefers a minimal answer to writes.
func (s *Server) itemResponse(r *http.Request, c *container, it *item, status int, charge float64) response {
	var resp response
	if r.Method != http.MethodGet && strings.EqualFold(r.Header.Get("Prefer"), "return=minimal") {
		resp = newResponse(status, nil)
	} else {
		resp = jsonResponse(status, c.doc(it))
	}
	resp.header.Set("etag", it.etag)
	resp.header.Set("lsn", fmt.Sprint(s.lsn))
	resp.charge = charge
	return resp
}

// item serves the operations on one item: read, replace, delete, patch.
func (s *Server) item(r *http.Request, c *container, id string, body []byte) response {
	if resp, refused := refuseOptions(r); refused {
		return resp
	}
	pk, ok, err := pkHeader(r)
	switch {
	case err != nil:
		return errorResponse(http.StatusBadRequest, err.Error())
	case !ok:
		return errorResponse(http.StatusBadRequest, "PartitionKey value must be supplied for this operation (header x-ms-documentdb-partitionkey).")
	}
	old := s.lookup(c, pk, id)
	if old == nil {
		if r.Method != http.MethodGet && r.Method != http.MethodPut && r.Method != http.MethodDelete && r.Method != http.MethodPatch {
			return notModelled("%s of an item", r.Method)
		}
		return errorResponse(http.StatusNotFound, "Entity with the specified id does not exist in the system., "+id)
	}
	if m := r.Header.Get("If-Match"); m != "" && m != "*" && m != old.etag {
		return errorResponse(http.StatusPreconditionFailed, "Operation cannot be performed because one of the specified precondition is not met (If-Match "+m+", the item's etag is "+old.etag+")")
	}
	switch r.Method {
	case http.MethodGet:
		if m := r.Header.Get("If-None-Match"); m != "" && (m == "*" || m == old.etag) {
			resp := newResponse(http.StatusNotModified, nil)
			resp.header.Set("etag", old.etag)
			resp.charge = 1
			return resp
		}
		return s.itemResponse(r, c, old, http.StatusOK, readCharge(c.doc(old)))
	case http.MethodDelete:
		delete(c.parts[pk], id)
		s.lsn++
		resp := newResponse(http.StatusNoContent, nil)
		resp.charge = writeCharge(0)
		return resp
	case http.MethodPut:
		it, resp, ok := parseItem(r, c, body)
		if !ok {
			return resp
		}
		if it.id != id {
			return errorResponse(http.StatusBadRequest, fmt.Sprintf("The id of the item in the body, %q, is not the one in the path, %q", it.id, id))
		}
		it.rid, it.seq = old.rid, old.seq
		s.put(c, it)
		return s.itemResponse(r, c, it, http.StatusOK, writeCharge(len(body)))
	case http.MethodPatch:
		return s.patch(r, c, old, body)
	}
	return notModelled("%s of an item", r.Method)
}
