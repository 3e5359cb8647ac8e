module github.com/idemgo/idem/idemhttp

go 1.26.0

require github.com/idemgo/idem v0.1.0
