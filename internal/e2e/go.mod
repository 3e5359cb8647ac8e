module github.com/idemgo/idem/internal/e2e

go 1.26.0

replace github.com/idemgo/idem => ../..
