module github.com/idemgo/idem/store/cosmos

go 1.26.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.23.0
	github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos v1.4.1
	github.com/idemgo/idem v0.1.0
)
