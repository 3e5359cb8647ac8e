package cosmostest

import (
	"encoding/json"
	"testing"
)

// FuzzQuery: any query text is parsed or refused with an error, and a
// parsed one evaluates over an item without panicking.
func FuzzQuery(f *testing.F) {
	for _, q := range []string{
		"SELECT * FROM c WHERE c.ord > @after AND c.scope = @scope ORDER BY c.ord",
		"SELECT TOP 3 c.id, c['a b'] AS x FROM root WHERE NOT IS_DEFINED(root.x) OR root.n IN (1, 'a', null)",
		"SELECT VALUE COUNT(1) FROM c WHERE c.n >= -1.5e3 OFFSET @o LIMIT 10",
		"from c where c.token = 5 and c.state = 'in_progress'",
		`SELECT * FROM c WHERE c.s = "\u00e9\ud83d\ude00" AND (c.a <> c.b)`,
		"SELECT * FROM c JOIN t IN c.tags",
	} {
		f.Add(q)
	}
	var doc map[string]any
	_ = json.Unmarshal([]byte(`{"id":"x","n":3,"s":"k","a":{"b":[1,2]},"t":true,"z":null}`), &doc)
	params := map[string]any{"@after": "", "@scope": "s", "@o": json.Number("1")}
	f.Fuzz(func(t *testing.T, src string) {
		e := &env{doc: doc, params: params}
		if q, err := parseQuery(src); err == nil {
			if q.where != nil {
				q.where.eval(e)
			}
			for _, o := range q.orderBy {
				o.path.eval(e)
			}
			for _, fl := range q.fields {
				fl.path.eval(e)
			}
		}
		if q, err := parseCondition(src); err == nil {
			truthy(q.where.eval(e))
		}
	})
}
