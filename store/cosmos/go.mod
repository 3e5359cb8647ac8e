module github.com/idemgo/idem/store/cosmos

go 1.26.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.23.0
	github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos v1.4.1
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/entity v0.1.0
)

require (
	github.com/Azure/azure-sdk-for-go v68.0.0+incompatible // indirect
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.12.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)
