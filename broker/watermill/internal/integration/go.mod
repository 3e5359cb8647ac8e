module github.com/idemgo/idem/broker/watermill/internal/integration

go 1.26.0

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/brokertest v0.1.0
	github.com/idemgo/idem/broker/watermill v0.1.0
	github.com/idemgo/idem/internal/consumetest v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
)
