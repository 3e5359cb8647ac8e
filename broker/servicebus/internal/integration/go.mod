module github.com/idemgo/idem/broker/servicebus/internal/integration

go 1.26.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus v1.11.0
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/brokertest v0.1.0
	github.com/idemgo/idem/broker/servicebus v0.1.0
)
