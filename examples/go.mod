module github.com/idemgo/idem/examples

go 1.26.0

require (
	github.com/idemgo/idem/internal/ferretdbtest v0.1.0
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus v1.11.0
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/kafka v0.1.0
	github.com/idemgo/idem/broker/nats v0.1.0
	github.com/idemgo/idem/broker/servicebus v0.1.0
	github.com/idemgo/idem/entity v0.1.0
	github.com/idemgo/idem/entity/entitypgx v0.1.0
	github.com/idemgo/idem/idemhttp v0.1.0
	github.com/idemgo/idem/internal/pgtest v0.1.0
	github.com/idemgo/idem/job v0.1.0
	github.com/idemgo/idem/load v0.1.0
	github.com/idemgo/idem/outbox v0.1.0
	github.com/idemgo/idem/outbox/nats v0.1.0
	github.com/idemgo/idem/outbox/postgres v0.1.0
	github.com/idemgo/idem/store/mongo v0.1.0
	github.com/idemgo/idem/store/postgres v0.1.0
	github.com/idemgo/idem/store/redis v0.1.0
	github.com/idemgo/idem/store/sqlite v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats-server/v2 v2.15.3
	github.com/nats-io/nats.go v1.55.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	go.mongodb.org/mongo-driver/v2 v2.10.0
	modernc.org/sqlite v1.62.0
)

require (
	github.com/idemgo/idem/internal/ferretdbtest v0.1.0
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.23.0 // indirect
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.12.0 // indirect
	github.com/Azure/go-amqp v1.7.0 // indirect
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemgo/idem/internal/pgxtx v0.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/xdg-go/scram v1.4.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
