package cosmostest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// container is a container of a database: its properties and its items,
// by logical partition.
type container struct {
	db            *database
	id, rid, etag string
	ts            time.Time

	pkPath     string   // "/pk"
	pkParts    []string // the path's property names: ["pk"]
	pkVersion  int      // 1 or 2, as created
	defaultTTL *int64   // nil: items never expire; -1: only items with a ttl; n: n seconds
	indexing   map[string]any
	composite  [][]compositePath
	conflicts  map[string]any

	parts map[string]map[string]*item // canonical partition key → id → item
	seq   int64                       // insertion counter: the order of a feed
}

// compositePath is one path of a composite index, with its order.
type compositePath struct {
	path string
	desc bool
}

// defaultIndexing is the indexing policy of a container created without
// one: everything indexed, consistently.
func defaultIndexing() map[string]any {
	return map[string]any{
		"indexingMode":  "consistent",
		"automatic":     true,
		"includedPaths": []any{map[string]any{"path": "/*"}},
		"excludedPaths": []any{map[string]any{"path": `/"_etag"/?`}},
	}
}

// containerFields are the properties a container definition may have.
var containerFields = map[string]bool{
	"id": true, "partitionKey": true, "defaultTtl": true, "indexingPolicy": true,
	"conflictResolutionPolicy": true, "uniqueKeyPolicy": true,
	"_rid": true, "_self": true, "_etag": true, "_ts": true, "_docs": true,
	"_sprocs": true, "_triggers": true, "_udfs": true, "_conflicts": true, "geospatialConfig": true,
}

// parseContainer reads a container definition: a new one (old nil), or a
// replacement of old, whose partition key may not change.
func parseContainer(body []byte, old *container) (*container, response, bool) {
	bad := func(format string, args ...any) (*container, response, bool) {
		return nil, errorResponse(http.StatusBadRequest, fmt.Sprintf(format, args...)), false
	}
	m, err := decodeObject(body)
	if err != nil {
		return bad("%v", err)
	}
	for k := range m {
		if !containerFields[k] {
			return nil, notModelled("the container property %q", k), false
		}
	}
	c := &container{}
	c.id, _ = m["id"].(string)
	if err := checkID("container", c.id); err != nil {
		return bad("%v", err)
	}
	var def struct {
		Paths   []string `json:"paths"`
		Kind    string   `json:"kind"`
		Version int      `json:"version"`
	}
	raw, _ := json.Marshal(m["partitionKey"])
	if err := json.Unmarshal(raw, &def); err != nil || m["partitionKey"] == nil {
		return nil, notModelled("containers without a partition key definition (legacy non-partitioned containers)"), false
	}
	switch {
	case def.Kind == "MultiHash" || len(def.Paths) > 1:
		return nil, notModelled("hierarchical partition keys (kind MultiHash)"), false
	case def.Kind != "" && def.Kind != "Hash":
		return bad("The partition key kind %q is not valid", def.Kind)
	case len(def.Paths) != 1:
		return bad("The partition key definition has no path")
	}
	c.pkPath, c.pkVersion = def.Paths[0], def.Version
	if c.pkVersion == 0 {
		c.pkVersion = 1
	}
	if c.pkParts, err = splitPath(c.pkPath); err != nil {
		return bad("The partition key path %q is not valid: %v", c.pkPath, err)
	}
	if old != nil && (old.pkPath != c.pkPath) {
		return bad("The partition key of a container cannot change: %s has %s, the replacement %s", old.id, old.pkPath, c.pkPath)
	}
	if v, ok := m["defaultTtl"]; ok && v != nil {
		n, ok := v.(json.Number)
		i, err := n.Int64()
		if !ok || err != nil || (i != -1 && i < 1) || i > 1<<31-1 {
			return bad("The value of defaultTtl, %v, is not valid: it is -1 or a number of seconds from 1 to 2147483647", v)
		}
		c.defaultTTL = &i
	}
	if u, ok := m["uniqueKeyPolicy"].(map[string]any); ok {
		if keys, _ := u["uniqueKeys"].([]any); len(keys) > 0 {
			return nil, notModelled("unique key policies"), false
		}
	}
	c.conflicts, _ = m["conflictResolutionPolicy"].(map[string]any)
	c.indexing = defaultIndexing()
	if ip, ok := m["indexingPolicy"].(map[string]any); ok {
		c.indexing = ip
		if c.composite, err = parseComposite(ip["compositeIndexes"]); err != nil {
			return bad("The indexing policy's compositeIndexes are not valid: %v", err)
		}
	}
	return c, response{}, true
}

// parseComposite reads indexingPolicy.compositeIndexes.
func parseComposite(v any) ([][]compositePath, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not a list")
	}
	var out [][]compositePath
	for _, l := range list {
		paths, ok := l.([]any)
		if !ok || len(paths) < 2 {
			return nil, fmt.Errorf("a composite index is a list of at least two paths")
		}
		var ix []compositePath
		for _, p := range paths {
			pm, _ := p.(map[string]any)
			path, _ := pm["path"].(string)
			order, _ := pm["order"].(string)
			if _, err := splitPath(path); err != nil {
				return nil, err
			}
			ix = append(ix, compositePath{path: path, desc: strings.EqualFold(order, "descending")})
		}
		out = append(out, ix)
	}
	return out, nil
}

// splitPath splits a JSON path of the form /a/b into its property names.
func splitPath(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") || len(p) < 2 {
		return nil, fmt.Errorf("a path starts with / and names a property")
	}
	parts := strings.Split(p[1:], "/")
	for _, s := range parts {
		if s == "" || strings.ContainsAny(s, `*?[]"`) {
			return nil, fmt.Errorf("cosmostest models paths of plain property names, not %q", p)
		}
	}
	return parts, nil
}

func (c *container) props() map[string]any {
	m := map[string]any{
		"id":             c.id,
		"indexingPolicy": c.indexing,
		"partitionKey":   map[string]any{"paths": []string{c.pkPath}, "kind": "Hash", "version": c.pkVersion},
		"_rid":           c.rid,
		"_self":          "dbs/" + c.db.rid + "/colls/" + c.rid + "/",
		"_etag":          c.etag,
		"_ts":            c.ts.Unix(),
		"_docs":          "docs/",
		"_sprocs":        "sprocs/",
		"_triggers":      "triggers/",
		"_udfs":          "udfs/",
		"_conflicts":     "conflicts/",
	}
	if c.defaultTTL != nil {
		m["defaultTtl"] = *c.defaultTTL
	}
	if c.conflicts != nil {
		m["conflictResolutionPolicy"] = c.conflicts
	}
	return m
}

// hasComposite reports whether the container has a composite index that
// serves an ORDER BY over paths (in order, each ascending or each
// reversed).
func (c *container) hasComposite(paths []compositePath) bool {
	for _, ix := range c.composite {
		if len(ix) != len(paths) {
			continue
		}
		same, reversed := true, true
		for i := range ix {
			if ix[i].path != paths[i].path {
				same, reversed = false, false
				break
			}
			if ix[i].desc != paths[i].desc {
				same = false
			} else {
				reversed = false
			}
		}
		if same || reversed {
			return true
		}
	}
	return false
}

// pkOf returns the canonical partition key of an item body: the JSON of
// the value at the container's path, or "{}" when the item has none
// (Cosmos DB's "undefined" partition key).
func (c *container) pkOf(body map[string]any) (string, error) {
	var v any = body
	for _, p := range c.pkParts {
		m, ok := v.(map[string]any)
		if !ok {
			return "{}", nil
		}
		if v, ok = m[p]; !ok {
			return "{}", nil
		}
	}
	switch v.(type) {
	case string, json.Number, bool, nil:
	default:
		return "", fmt.Errorf("The partition key value at %s is an object or an array; it must be a string, a number, a boolean or null", c.pkPath)
	}
	return canonPK(v), nil
}

// canonPK is the canonical JSON of a partition key value, the key of its
// logical partition: numbers by value (1 and 1.0 are one partition).
func canonPK(v any) string {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			v = f
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// pkHeader reads x-ms-documentdb-partitionkey: a JSON array of one value.
// ok is false when the header is absent.
func pkHeader(r *http.Request) (pk string, ok bool, err error) {
	h := r.Header.Get("x-ms-documentdb-partitionkey")
	if h == "" {
		return "", false, nil
	}
	var vals []any
	dec := json.NewDecoder(strings.NewReader(h))
	dec.UseNumber()
	if err := dec.Decode(&vals); err != nil {
		return "", true, fmt.Errorf("The partition key %s in the header x-ms-documentdb-partitionkey is not a JSON array: %v", h, err)
	}
	if len(vals) != 1 {
		return "", true, fmt.Errorf("The partition key supplied in x-ms-partitionkey header has %d components; the container's definition has 1", len(vals))
	}
	switch v := vals[0].(type) {
	case string, json.Number, bool, nil:
	case map[string]any:
		if len(v) != 0 {
			return "", true, fmt.Errorf("The partition key %s is not valid", h)
		}
	default:
		return "", true, fmt.Errorf("The partition key %s is not valid", h)
	}
	return canonPK(vals[0]), true, nil
}
