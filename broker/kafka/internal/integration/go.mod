module github.com/idemgo/idem/broker/kafka/internal/integration

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/broker/brokertest v0.1.0
	github.com/idemgo/idem/broker/kafka v0.1.0
	github.com/idemgo/idem/store/mysql v0.1.0
	github.com/idemgo/idem/store/postgres v0.1.0
	github.com/idemgo/idem/store/sqlite v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)
