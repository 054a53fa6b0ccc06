// Package integration runs the worker end to end against real peers (Redis,
// an SMTP server, a Kafka broker) started with testcontainers-go and the
// Twilio double served in the test process, and holds the harness that
// starts them.
//
// The test files carry the build tag `integration`, so `go test ./...`
// stays fast and needs no Docker engine; the harness itself (this package's
// non-test files) is untagged, so `go vet ./...` keeps it compiling. Run the
// suite with
//
//	scripts/docker-up.sh && scripts/build-images.sh
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go test -tags integration -count=1 -timeout 12m ./integration/...
//
// Every container uses host networking and listens on a free loopback port,
// so tests talk to 127.0.0.1 only and run in parallel without port clashes.
//
// Images: each peer's image is taken from an environment variable whose
// default is the public image a developer would pull (REDIS_IMAGE=redis:7,
// MAILPIT_IMAGE=axllent/mailpit, WORKER_IMAGE=notification-worker:dev). Where no registry is reachable and
// the default is not present locally, the harness falls back to the
// registry-free images scripts/build-images.sh builds (notification-worker/...)
// and says which image it used in the test log. Kafka is Apache Kafka
// (KAFKA_IMAGE, default notification-worker/kafka:4.4.0, assembled from
// Maven Central's jars by scripts/build-images.sh kafka); without that image
// the harness falls back to kfake in the test process (KAFKA_IMAGE=kfake
// asks for it) and every test's "broker:" line says so.
package integration
