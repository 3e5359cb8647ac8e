module github.com/idemgo/idem/store/storetest/lincheck

go 1.26.0

replace github.com/idemgo/idem => ../../..

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/idemgo/idem v0.0.0-00010101000000-000000000000
)
