module github.com/idemgo/idem/store/storetest/lincheck

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/idemgo/idem v0.1.0
)
