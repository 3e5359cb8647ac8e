package dsn

// Forms is the reference of every DSN form and of the parameters idem reads
// from them; the commands' --help prints it, and docs/operations.md repeats it.
const Forms = `Store DSNs (--store DSN, or the IDEM_STORE environment variable):

  memory://[NAME]
      in-process, gone when the command ends (NAME shares one store within a process)
  sqlite://PATH[?table=T][&sync=normal]
      an SQLite file, created if missing: sqlite://idem.db is relative,
      sqlite:///var/lib/app/idem.db absolute
  postgres://USER[:PASS]@HOST[:PORT]/DB[?table=T][&partitions=N][&PGX_PARAM=V...]
      PostgreSQL (also postgresql://); other parameters go to pgx: sslmode,
      connect_timeout, pool_max_conns, ...
  mysql://USER[:PASS]@HOST[:PORT]/DB[?table=T][&DRIVER_PARAM=V...]
      MariaDB / MySQL (also mariadb://), port 3306 when left out; other
      parameters go to go-sql-driver/mysql: tls, timeout, ...
  redis://[USER:PASS@]HOST[:PORT][/DB][?prefix=P][&GO_REDIS_PARAM=V...]
      Redis (rediss:// for TLS); other parameters go to go-redis:
      dial_timeout, max_retries, ...
  mongodb://[USER:PASS@]HOST[:PORT][,HOST...]/[DB][?collection=C][&ttl=none][&DRIVER_PARAM=V...]
      MongoDB API: MongoDB, Cosmos DB for MongoDB, FerretDB (also mongodb+srv://);
      database idem when left out; other parameters go to the driver:
      replicaSet, authSource, tls, ...
  cosmos://HOST[:PORT][?key=K][&database=D][&container=C][&ca=FILE]
      Azure Cosmos DB for NoSQL at the account endpoint https://HOST:PORT/
      (port 443 when left out): cosmos://ACCOUNT.documents.azure.com?key=K;
      the emulator: cosmos://127.0.0.1:8081?ca=emulator.pem (its key is the default)

Parameters idem reads:
  table=T       the records table of an SQL store (default idem_records);
                on PostgreSQL it may name a schema too (app.idem_records)
  prefix=P      the key prefix of a Redis store (default idem)
  partitions=N  PostgreSQL: migrate creates the table hash-partitioned into
                N >= 2 partitions (default: a plain table); only the
                migrate that creates the table reads it
  sync=normal   SQLite: sync the WAL at checkpoints only (faster; the last
                commits before a power loss can be lost); default full
  collection=C  the records collection of a MongoDB store (default idem_records)
  ttl=none      MongoDB: migrate creates no TTL index (ttl=required: fail
                where the server has none; default: create it where it can)
  key=K         Cosmos DB: the account key (base64: write + / = as %2B %2F %3D);
                default $IDEM_COSMOS_KEY, else the emulator's well-known key
  database=D    Cosmos DB: the records' database (default idem)
  container=C   Cosmos DB: the records' container (default idem_records)
  ca=FILE       Cosmos DB: PEM certificates to trust beside the system's (the
                emulator's self-signed one, from its /_explorer/emulator.pem)

Every command on one store needs the same table or prefix as the program
that writes it: stats on a DSN without ?table= reads idem_records.

DSN examples:
  sqlite://idem.db
  postgres://app:secret@db.internal:5432/app?sslmode=require&table=billing_inbox
  mysql://root@127.0.0.1:3306/test?table=idem_records
  redis://127.0.0.1:6379/0?prefix=billing
  mongodb://127.0.0.1:27017/shop?collection=idem_records
  cosmos://shop.documents.azure.com?container=billing_records (the key in $IDEM_COSMOS_KEY)`
