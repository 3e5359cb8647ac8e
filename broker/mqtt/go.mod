module github.com/idemgo/idem/broker/mqtt

go 1.26.0

require (
	github.com/eclipse/paho.golang v0.23.0
	github.com/idemgo/idem v0.1.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	golang.org/x/net v0.43.0 // indirect
)
