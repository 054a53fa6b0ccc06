# The notification-worker production image: one static binary on scratch,
# non-root, configured by environment only (see README.md, Configuration).
#
# Build (what `make image` and scripts/build-images.sh do):
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' \
#     -o bin/notification-worker-linux-amd64 ./cmd/notification-worker
#   cp /etc/ssl/certs/ca-certificates.crt bin/
#   docker build -t notification-worker:dev .
#
# Why not a multi-stage build with a golang base image: the machines this
# project builds on (CI included) reach no container registry, and
# `FROM scratch` is the only base that needs no pull. The binary is built by
# the host's Go toolchain, the same one the tests ran with.
FROM scratch

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
