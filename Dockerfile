# The notification-worker production image: one static binary on scratch,
# non-root, configured by environment only (see README.md, Configuration).
#
# Build (what `make image` and scripts/build-images.sh do):
#   CGO_ENABLED=0 GOOS=linux go build -trimpath \
#     -ldflags="-s -w -X main.version=$VERSION" \
#     -o bin/notification-worker-linux-amd64 ./cmd/notification-worker
#   cp /etc/ssl/certs/ca-certificates.crt bin/
#   docker build --build-arg VERSION=$VERSION -t notification-worker:dev .
#
# The version is linked into the binary (the start-up line and the
# notification_worker_build_info metric show it); the image carries it as
# a label too.
#
# Why not a multi-stage build with a golang base image: the machines this
# project builds on (CI included) reach no container registry, and
# `FROM scratch` is the only base that needs no pull. The binary is built by
# the host's Go toolchain, the same one the tests ran with.
FROM scratch

ARG VERSION=dev
LABEL org.opencontainers.image.version=$VERSION

# The worker dials TLS (Twilio, SMTP STARTTLS, rediss://); scratch has no
# trust store of its own.
COPY bin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY bin/notification-worker-linux-amd64 /notification-worker

# 65532 is the conventional "nonroot" id; scratch has no /etc/passwd, so it
# is given numerically.
USER 65532:65532

# HTTP_ADDR's default: /healthz, /readyz, /metrics.
EXPOSE 8080

ENTRYPOINT ["/notification-worker"]
