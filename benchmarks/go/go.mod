module searchwire.invalid/benchmarks

go 1.26.8

require (
	github.com/elastic/go-elasticsearch/v8 v8.19.7
	github.com/opensearch-project/opensearch-go/v4 v4.8.1
)

require (
	github.com/elastic/elastic-transport-go/v8 v8.9.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/metric v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
