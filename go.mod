module github.com/agentsaga/agentsaga

go 1.26.8

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/temporalio/ui-server/v2 v2.54.1 // indirect
	go.temporal.io/api v1.63.5 // indirect
	go.temporal.io/sdk v1.50.0 // indirect
	go.temporal.io/server v1.32.1 // indirect
	golang.org/x/text v0.41.0 // indirect
)
