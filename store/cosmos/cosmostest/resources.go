package cosmostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxIDLen is the longest id of a database, container or item.
const maxIDLen = 255

// checkID applies Cosmos DB's rules for a resource id.
func checkID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("The input content is invalid because the required properties - 'id; ' - are missing (%s)", what)
	case len(id) > maxIDLen:
		return fmt.Errorf("The %s id is %d characters long; the limit is %d", what, len(id), maxIDLen)
	case strings.ContainsAny(id, `/\?#`):
		return fmt.Errorf("The %s id %q contains one of the characters '/', '\\', '?', '#', which ids may not", what, id)
	}
	return nil
}

// database is a database of the account.
type database struct {
	id, rid, etag string
	ts            time.Time
	colls         map[string]*container
}

func (d *database) props() map[string]any {
	return map[string]any{"id": d.id, "_rid": d.rid, "_self": "dbs/" + d.rid + "/", "_etag": d.etag,
		"_colls": "colls/", "_users": "users/", "_ts": d.ts.Unix()}
}

// decodeObject decodes a JSON object, numbers kept as written.
func decodeObject(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("The request body is not a JSON object: %v", err)
	}
	if m == nil {
		return nil, fmt.Errorf("The request body is not a JSON object")
	}
	if dec.More() {
		return nil, fmt.Errorf("The request body has data after its JSON object")
	}
	return m, nil
}

// etag returns a new entity tag. Callers hold s.mu.
func (s *Server) etag() string {
	s.lsn++
	return fmt.Sprintf(`"%08x-0000-0000-0000-%012x"`, s.lsn>>48, s.lsn)
}

func (s *Server) createDatabase(body []byte) response {
	m, err := decodeObject(body)
	if err != nil {
		return errorResponse(http.StatusBadRequest, err.Error())
	}
	id, _ := m["id"].(string)
	if err := checkID("database", id); err != nil {
		return errorResponse(http.StatusBadRequest, err.Error())
	}
	for k := range m {
		if k != "id" {
			return notModelled("the database property %q", k)
		}
	}
	if _, ok := s.dbs[id]; ok {
		return errorResponse(http.StatusConflict, "Entity with the specified id already exists in the system. database "+id)
	}
	d := &database{id: id, rid: newRID(), etag: s.etag(), ts: s.now(), colls: map[string]*container{}}
	s.dbs[id] = d
	r := jsonResponse(http.StatusCreated, d.props())
	r.charge = 5
	return r
}

// database serves GET and DELETE of one database.
func (s *Server) database(r *http.Request, id string) response {
	d, ok := s.dbs[id]
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodDelete:
		return notModelled("%s of a database", methodName(r))
	case !ok:
		return errorResponse(http.StatusNotFound, "Resource Not Found: database "+id+" does not exist")
	case r.Method == http.MethodDelete:
		delete(s.dbs, id)
		s.lsn++
		resp := newResponse(http.StatusNoContent, nil)
		resp.charge = 5
		return resp
	}
	resp := jsonResponse(http.StatusOK, d.props())
	resp.header.Set("etag", d.etag)
	resp.charge = 1
	return resp
}

func (s *Server) createContainer(db *database, body []byte) response {
	c, resp, ok := parseContainer(body, nil)
	if !ok {
		return resp
	}
	if _, dup := db.colls[c.id]; dup {
		return errorResponse(http.StatusConflict, "Entity with the specified id already exists in the system. container "+c.id)
	}
	c.db, c.rid, c.etag, c.ts = db, newRID(), s.etag(), s.now()
	c.parts = map[string]map[string]*item{}
	db.colls[c.id] = c
	resp = jsonResponse(http.StatusCreated, c.props())
	resp.header.Set("etag", c.etag)
	resp.charge = 5
	return resp
}

// container serves GET, PUT (replace) and DELETE of one container.
func (s *Server) container(r *http.Request, db *database, id string, body []byte) response {
	c, ok := db.colls[id]
	if !ok && (r.Method == http.MethodGet || r.Method == http.MethodPut || r.Method == http.MethodDelete) {
		return errorResponse(http.StatusNotFound, fmt.Sprintf("Resource Not Found: container %s does not exist in database %s", id, db.id))
	}
	if m := r.Header.Get("If-Match"); m != "" && ok && m != c.etag {
		return errorResponse(http.StatusPreconditionFailed, "Operation cannot be performed because one of the specified precondition is not met (If-Match "+m+")")
	}
	switch r.Method {
	case http.MethodGet:
		resp := jsonResponse(http.StatusOK, c.props())
		resp.header.Set("etag", c.etag)
		resp.charge = 1
		return resp
	case http.MethodDelete:
		delete(db.colls, id)
		s.lsn++
		resp := newResponse(http.StatusNoContent, nil)
		resp.charge = 5
		return resp
	case http.MethodPut:
		n, resp, ok := parseContainer(body, c)
		if !ok {
			return resp
		}
		if n.id != c.id {
			return errorResponse(http.StatusBadRequest, fmt.Sprintf("The container id %q in the body is not the one in the path, %q", n.id, c.id))
		}
		c.defaultTTL, c.indexing, c.composite, c.conflicts = n.defaultTTL, n.indexing, n.composite, n.conflicts
		c.etag, c.ts = s.etag(), s.now()
		resp = jsonResponse(http.StatusOK, c.props())
		resp.header.Set("etag", c.etag)
		resp.charge = 5
		return resp
	}
	return notModelled("%s of a container", methodName(r))
}
