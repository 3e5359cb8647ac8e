// Package cosmostest is an in-process Azure Cosmos DB for NoSQL account.
package cosmostest
