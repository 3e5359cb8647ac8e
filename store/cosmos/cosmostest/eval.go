package cosmostest

import (
	"encoding/json"
	"reflect"
	"strings"
)

// undefinedT is Cosmos DB's undefined: a missing property, or a
// comparison of values of different types.
type undefinedT struct{}

var undefined any = undefinedT{}

// env is what an expression is evaluated against: an item as the server
// returns it, and the query's parameters.
type env struct {
	doc    map[string]any
	params map[string]any
}

type expr interface{ eval(e *env) any }

type lit struct{ v any }

func (l lit) eval(*env) any { return l.v }

type param struct{ name string }

func (p param) eval(e *env) any {
	v, ok := e.params[p.name]
	if !ok {
		return undefined
	}
	return norm(v)
}

type pathExpr struct {
	root  string
	props []string
}

func (pe *pathExpr) eval(e *env) any {
	var v any = e.doc
	for _, p := range pe.props {
		m, ok := v.(map[string]any)
		if !ok {
			return undefined
		}
		if v, ok = m[p]; !ok {
			return undefined
		}
	}
	return norm(v)
}

// norm turns the numbers of decoded JSON and of system properties into
// float64, as Cosmos DB's numbers are.
func norm(v any) any {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return undefined
		}
		return f
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return v
}

type logic struct {
	or   bool
	l, r expr
}

func (x logic) eval(e *env) any {
	lb, lok := x.l.eval(e).(bool)
	rb, rok := x.r.eval(e).(bool)
	if x.or {
		switch {
		case lok && lb, rok && rb:
			return true
		case lok && rok:
			return false
		}
		return undefined
	}
	switch {
	case lok && !lb, rok && !rb:
		return false
	case lok && rok:
		return true
	}
	return undefined
}

type not struct{ x expr }

func (n not) eval(e *env) any {
	if b, ok := n.x.eval(e).(bool); ok {
		return !b
	}
	return undefined
}

type compare struct {
	op   string
	l, r expr
}

func (c compare) eval(e *env) any {
	l, r := c.l.eval(e), c.r.eval(e)
	if l == undefined || r == undefined || typeRank(l) != typeRank(r) {
		return undefined
	}
	switch c.op {
	case "=":
		return reflect.DeepEqual(l, r)
	case "!=":
		return !reflect.DeepEqual(l, r)
	}
	cmp, ok := order(l, r)
	if !ok {
		return undefined
	}
	switch c.op {
	case "<":
		return cmp < 0
	case "<=":
		return cmp <= 0
	case ">":
		return cmp > 0
	}
	return cmp >= 0
}

type inList struct {
	x    expr
	list []expr
}

func (in inList) eval(e *env) any {
	x := in.x.eval(e)
	if x == undefined {
		return undefined
	}
	for _, v := range in.list {
		if y := v.eval(e); typeRank(x) == typeRank(y) && reflect.DeepEqual(x, y) {
			return true
		}
	}
	return false
}

type call struct {
	name string
	x    expr
}

func (c call) eval(e *env) any {
	v := c.x.eval(e)
	switch c.name {
	case "is_defined":
		return v != undefined
	case "is_null":
		return v == nil
	case "is_string":
		_, ok := v.(string)
		return ok
	case "is_number":
		_, ok := v.(float64)
		return ok
	}
	_, ok := v.(bool)
	return ok
}

// typeRank orders types as ORDER BY does: undefined, null, booleans,
// numbers, strings, then arrays and objects.
func typeRank(v any) int {
	switch v.(type) {
	case undefinedT:
		return 0
	case nil:
		return 1
	case bool:
		return 2
	case float64:
		return 3
	case string:
		return 4
	case []any:
		return 5
	}
	return 6
}

// order compares two values of one type; ok is false for arrays and
// objects, which have no order.
func order(a, b any) (int, bool) {
	switch x := a.(type) {
	case nil, undefinedT:
		return 0, true
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0, true
		case !x:
			return -1, true
		}
		return 1, true
	case float64:
		y := b.(float64)
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	case string:
		return strings.Compare(x, b.(string)), true
	}
	return 0, false
}

// sortCompare orders any two values for ORDER BY: by type, then within
// the type.
func sortCompare(a, b any) int {
	ra, rb := typeRank(a), typeRank(b)
	if ra != rb {
		return ra - rb
	}
	c, _ := order(a, b)
	return c
}

// truthy reports whether a WHERE condition keeps an item: only true does.
func truthy(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

// walk calls visit on every path in x.
func walk(x expr, visit func(*pathExpr)) {
	switch n := x.(type) {
	case *pathExpr:
		visit(n)
	case logic:
		walk(n.l, visit)
		walk(n.r, visit)
	case not:
		walk(n.x, visit)
	case compare:
		walk(n.l, visit)
		walk(n.r, visit)
	case inList:
		walk(n.x, visit)
		for _, v := range n.list {
			walk(v, visit)
		}
	case call:
		walk(n.x, visit)
	}
}
