module github.com/idemgo/idem/store/storetest/lincheck

go 1.26.0

replace github.com/idemgo/idem => ../../..
