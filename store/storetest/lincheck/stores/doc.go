// Package stores runs the linearizability check of package lincheck
// against every store of this repository (memory, SQLite, PostgreSQL,
// MariaDB/MySQL, Redis, MongoDB wire protocol). It is a module of its own so
// that lincheck's module requires only idem and porcupine: a store author
// who imports lincheck does not inherit every store's dependencies.
//
//	go test ./store/storetest/lincheck/stores/                      # brief, as in CI
//	go test ./store/storetest/lincheck/stores/ -v -lincheck.ops=20000  # long form
package stores
