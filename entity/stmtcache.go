package entity

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// stmts holds the statements Table.Insert and Versioned.Apply built, by
// everything they were built from: each is validated and formatted once per
// table and column list, not once per message. The cache stops growing at
// maxCachedStmts entries (a program with that many column lists builds the
// others every time, as it did before).
var (
	stmts     sync.Map // stmtKey string -> string
	stmtCount atomic.Int64
)

const maxCachedStmts = 1024

// stmtKey is an unambiguous key for parts: each is length-prefixed, so no
// choice of names can make two different lists collide.
func stmtKey(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// cachedStmt returns the statement cached under key, or builds, caches and
// returns it. Build errors are returned and not cached.
func cachedStmt(key string, build func() (string, error)) (string, error) {
	if s, ok := stmts.Load(key); ok {
		return s.(string), nil
	}
	s, err := build()
	if err != nil {
		return "", err
	}
	if stmtCount.Load() < maxCachedStmts {
		if _, loaded := stmts.LoadOrStore(key, s); !loaded {
			stmtCount.Add(1)
		}
	}
	return s, nil
}
