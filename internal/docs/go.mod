module github.com/idemgo/idem/internal/docs

go 1.26.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus v1.11.0
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/aws/aws-sdk-go-v2/service/sqs v1.53.0
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/amqp v0.1.0
	github.com/idemgo/idem/broker/kafka v0.1.0
	github.com/idemgo/idem/broker/nats v0.1.0
	github.com/idemgo/idem/broker/redisstream v0.1.0
	github.com/idemgo/idem/broker/servicebus v0.1.0
	github.com/idemgo/idem/broker/sqs v0.1.0
	github.com/idemgo/idem/console v0.1.0
	github.com/idemgo/idem/idemhttp v0.1.0
	github.com/idemgo/idem/idemprom v0.1.0
	github.com/idemgo/idem/outbox v0.1.0
	github.com/idemgo/idem/outbox/nats v0.1.0
	github.com/idemgo/idem/outbox/postgres v0.1.0
	github.com/idemgo/idem/store/mysql v0.1.0
	github.com/idemgo/idem/store/postgres v0.1.0
	github.com/idemgo/idem/store/redis v0.1.0
	github.com/idemgo/idem/store/sqlite v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
)
