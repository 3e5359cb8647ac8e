package cosmostest

import (
	"fmt"
	"strconv"
	"strings"
)

// The query language it models, a subset of Cosmos DB's NoSQL queries:
//
//	SELECT [TOP n] (* | VALUE COUNT(1) | path [AS name], ...)
//	FROM alias
//	[WHERE condition]
//	[ORDER BY path [ASC|DESC], ...]
//	[OFFSET n LIMIT m]
//
// where a condition combines comparisons (= != <> < <= > >=), IN lists,
// AND, OR, NOT, parentheses and the functions IS_DEFINED, IS_NULL,
// IS_STRING, IS_NUMBER and IS_BOOL over paths (alias.a.b, alias["a"]),
// literals (strings, numbers, true, false, null) and @parameters. A
// patch's condition is "FROM alias WHERE condition". Anything else is
// refused with a 400 naming it.

// query is a parsed query.
type query struct {
	alias   string
	top     expr // nil: none
	star    bool
	count   bool // SELECT VALUE COUNT(1)
	fields  []field
	where   expr
	orderBy []orderItem
	offset  expr // nil: none (with limit)
	limit   expr
	params  map[string]bool // the parameters it names
}

type field struct {
	path *pathExpr
	name string
}

type orderItem struct {
	path *pathExpr
	desc bool
}

// unmodelled is a query feature the server does not model.
type unmodelled struct{ what string }

func (u *unmodelled) Error() string { return "cosmostest does not model " + u.what + " in queries" }

type parser struct {
	toks   []token
	i      int
	params map[string]bool
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// accept consumes the keyword or punctuation s if it is next.
func (p *parser) accept(s string) bool {
	if p.peek().is(s) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expect(s string) error {
	if !p.accept(s) {
		return p.errorf("expected %s", s)
	}
	return nil
}

func (p *parser) errorf(format string, args ...any) error {
	t := p.peek()
	at := "the end"
	if t.kind != tEOF {
		at = fmt.Sprintf("%q at %d", t.text, t.pos)
	}
	return fmt.Errorf("Syntax error near %s: %s", at, fmt.Sprintf(format, args...))
}

// keywords that end an expression or a clause, never names.
var reserved = map[string]bool{"select": true, "from": true, "where": true, "order": true, "by": true,
	"and": true, "or": true, "not": true, "in": true, "offset": true, "limit": true, "top": true,
	"value": true, "as": true, "asc": true, "desc": true, "join": true, "group": true, "distinct": true,
	"between": true, "like": true, "exists": true}

// unmodelledClauses are words that start a feature it refuses.
var unmodelledClauses = map[string]string{
	"join": "JOIN", "group": "GROUP BY", "distinct": "DISTINCT", "between": "BETWEEN", "like": "LIKE",
	"exists": "EXISTS", "array": "subquery ARRAY()", "udf": "user-defined functions",
}

func (p *parser) refuseClause() error {
	if t := p.peek(); t.kind == tIdent {
		if what, ok := unmodelledClauses[strings.ToLower(t.text)]; ok {
			return &unmodelled{what}
		}
	}
	return nil
}

// parseQuery parses a SELECT query.
func parseQuery(src string) (*query, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("Syntax error: %v", err)
	}
	p := &parser{toks: toks, params: map[string]bool{}}
	q := &query{}
	if err := p.expect("select"); err != nil {
		return nil, err
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	if p.accept("top") {
		if q.top, err = p.countArg("TOP"); err != nil {
			return nil, err
		}
	}
	if err := p.selectList(q); err != nil {
		return nil, err
	}
	if err := p.expect("from"); err != nil {
		return nil, err
	}
	if q.alias, err = p.aliasName(); err != nil {
		return nil, err
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	if p.accept("where") {
		if q.where, err = p.expr(); err != nil {
			return nil, err
		}
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	if p.accept("order") {
		if err := p.expect("by"); err != nil {
			return nil, err
		}
		for {
			pe, err := p.path()
			if err != nil {
				return nil, err
			}
			it := orderItem{path: pe}
			if p.accept("desc") {
				it.desc = true
			} else {
				p.accept("asc")
			}
			q.orderBy = append(q.orderBy, it)
			if !p.accept(",") {
				break
			}
		}
	}
	if p.accept("offset") {
		if q.offset, err = p.countArg("OFFSET"); err != nil {
			return nil, err
		}
		if err := p.expect("limit"); err != nil {
			return nil, err
		}
		if q.limit, err = p.countArg("LIMIT"); err != nil {
			return nil, err
		}
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	if p.peek().kind != tEOF {
		return nil, p.errorf("unexpected text after the query")
	}
	q.params = p.params
	return q, q.checkAlias()
}

// parseCondition parses a patch condition, "FROM alias WHERE condition".
func parseCondition(src string) (*query, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("Syntax error: %v", err)
	}
	p := &parser{toks: toks, params: map[string]bool{}}
	q := &query{star: true}
	if err := p.expect("from"); err != nil {
		return nil, err
	}
	if q.alias, err = p.aliasName(); err != nil {
		return nil, err
	}
	if err := p.expect("where"); err != nil {
		return nil, err
	}
	if q.where, err = p.expr(); err != nil {
		return nil, err
	}
	if p.peek().kind != tEOF {
		return nil, p.errorf("unexpected text after the condition")
	}
	if len(p.params) > 0 {
		return nil, &unmodelled{"parameters in a patch condition"}
	}
	return q, q.checkAlias()
}

func (p *parser) aliasName() (string, error) {
	t := p.next()
	if t.kind != tIdent || reserved[strings.ToLower(t.text)] {
		p.i--
		return "", p.errorf("expected the name of the container's alias")
	}
	if p.peek().kind == tIdent && !reserved[strings.ToLower(p.peek().text)] {
		return "", &unmodelled{"FROM with an alias of an alias (FROM root r) or an IN iteration"}
	}
	return t.text, nil
}

// countArg is the argument of TOP, OFFSET or LIMIT: a non-negative
// integer or a parameter.
func (p *parser) countArg(what string) (expr, error) {
	t := p.next()
	switch t.kind {
	case tNumber:
		n, err := strconv.Atoi(t.text)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("Syntax error: %s takes a non-negative integer, not %s", what, t.text)
		}
		return lit{float64(n)}, nil
	case tParam:
		p.params[t.text] = true
		return param{t.text}, nil
	}
	p.i--
	return nil, p.errorf("%s takes a number or a parameter", what)
}

func (p *parser) selectList(q *query) error {
	if p.accept("*") {
		q.star = true
		return nil
	}
	if p.accept("value") {
		t := p.peek()
		if t.is("count") {
			p.next()
			if p.expect("(") != nil || !(p.peek().kind == tNumber && p.peek().text == "1") {
				return &unmodelled{"COUNT of anything but 1 (SELECT VALUE COUNT(1))"}
			}
			p.next()
			q.count = true
			return p.expect(")")
		}
		return &unmodelled{"SELECT VALUE of anything but COUNT(1)"}
	}
	for {
		if t := p.peek(); t.kind == tIdent && p.toks[p.i+1].is("(") {
			return &unmodelled{"functions and aggregates in the SELECT list (" + t.text + ")"}
		}
		pe, err := p.path()
		if err != nil {
			return err
		}
		if len(pe.props) == 0 {
			return &unmodelled{"selecting the whole item by its alias (use *)"}
		}
		f := field{path: pe, name: pe.props[len(pe.props)-1]}
		if p.accept("as") {
			t := p.next()
			if t.kind != tIdent {
				return p.errorf("expected a name after AS")
			}
			f.name = t.text
		}
		q.fields = append(q.fields, f)
		if !p.accept(",") {
			return nil
		}
	}
}

// path parses alias(.name | ["name"])*.
func (p *parser) path() (*pathExpr, error) {
	t := p.next()
	if t.kind != tIdent || reserved[strings.ToLower(t.text)] {
		p.i--
		return nil, p.errorf("expected a property path")
	}
	pe := &pathExpr{root: t.text}
	for {
		switch {
		case p.accept("."):
			n := p.next()
			if n.kind != tIdent {
				p.i--
				return nil, p.errorf("expected a property name")
			}
			pe.props = append(pe.props, n.text)
		case p.accept("["):
			n := p.next()
			if n.kind != tString {
				return nil, &unmodelled{"array indexes and computed property names (only [\"name\"])"}
			}
			pe.props = append(pe.props, n.str)
			if err := p.expect("]"); err != nil {
				return nil, err
			}
		default:
			return pe, nil
		}
	}
}

func (p *parser) expr() (expr, error) { return p.or() }

func (p *parser) or() (expr, error) {
	l, err := p.and()
	for err == nil && p.accept("or") {
		var r expr
		if r, err = p.and(); err == nil {
			l = logic{or: true, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) and() (expr, error) {
	l, err := p.not()
	for err == nil && p.accept("and") {
		var r expr
		if r, err = p.not(); err == nil {
			l = logic{l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) not() (expr, error) {
	if p.accept("not") {
		x, err := p.not()
		return not{x}, err
	}
	return p.comparison()
}

var comparisons = []string{"=", "!=", "<>", "<=", ">=", "<", ">"}

func (p *parser) comparison() (expr, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	for _, op := range comparisons {
		if p.accept(op) {
			r, err := p.operand()
			if op == "<>" {
				op = "!="
			}
			return compare{op: op, l: l, r: r}, err
		}
	}
	negate := false
	if p.peek().is("not") && p.toks[p.i+1].is("in") {
		p.next()
		negate = true
	}
	if p.accept("in") {
		if err := p.expect("("); err != nil {
			return nil, err
		}
		in := inList{x: l}
		for {
			v, err := p.operand()
			if err != nil {
				return nil, err
			}
			in.list = append(in.list, v)
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		if negate {
			return not{in}, nil
		}
		return in, nil
	}
	return l, nil
}

// functions are the built-in functions it models, with their arity.
var functions = map[string]bool{"is_defined": true, "is_null": true, "is_string": true, "is_number": true, "is_bool": true}

func (p *parser) operand() (expr, error) {
	t := p.peek()
	switch {
	case t.is("("):
		p.next()
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		return x, p.expect(")")
	case t.is("-"):
		p.next()
		n := p.next()
		if n.kind != tNumber {
			return nil, &unmodelled{"arithmetic"}
		}
		f, _ := strconv.ParseFloat(n.text, 64)
		return lit{-f}, nil
	case t.kind == tNumber:
		p.next()
		f, _ := strconv.ParseFloat(t.text, 64)
		return lit{f}, nil
	case t.kind == tString:
		p.next()
		return lit{t.str}, nil
	case t.kind == tParam:
		p.next()
		p.params[t.text] = true
		return param{t.text}, nil
	case t.is("true"), t.is("false"):
		p.next()
		return lit{strings.EqualFold(t.text, "true")}, nil
	case t.is("null"):
		p.next()
		return lit{nil}, nil
	case t.is("undefined"):
		p.next()
		return lit{undefined}, nil
	case t.kind == tIdent && p.toks[p.i+1].is("("):
		name := strings.ToLower(t.text)
		if !functions[name] {
			return nil, &unmodelled{"the function " + strings.ToUpper(t.text)}
		}
		p.i += 2
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		return call{name: name, x: x}, p.expect(")")
	case t.kind == tIdent && !reserved[strings.ToLower(t.text)]:
		return p.path()
	case t.kind == tPunct && (t.text == "[" || t.text == "{"):
		return nil, &unmodelled{"array and object literals"}
	}
	if err := p.refuseClause(); err != nil {
		return nil, err
	}
	return nil, p.errorf("expected a value")
}

// checkAlias refuses paths rooted elsewhere than the FROM alias.
func (q *query) checkAlias() error {
	var bad string
	visit := func(pe *pathExpr) {
		if pe.root != q.alias && bad == "" {
			bad = pe.root
		}
	}
	walk(q.where, visit)
	for _, f := range q.fields {
		visit(f.path)
	}
	for _, o := range q.orderBy {
		visit(o.path)
	}
	if bad != "" {
		return fmt.Errorf("Identifier '%s' could not be resolved (the FROM alias is %s)", bad, q.alias)
	}
	return nil
}
