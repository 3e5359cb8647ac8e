module github.com/idemgo/idem/broker/eventhubs/checkpointstore

go 1.26.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.20.0
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2 v2.0.2
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/eventhubs v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
)

require (
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.11.2 // indirect
	github.com/Azure/go-amqp v1.5.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	golang.org/x/net v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
