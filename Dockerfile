# The notification-worker production image: one static binary on scratch,
# non-root, configured by environment only (see README.md, Configuration).
# It builds for amd64 and arm64: the binary is cross-compiled by the host's
# Go toolchain (go1.27.3, which go.mod asks for; GOTOOLCHAIN=go1.27.3, as
# the Makefile and scripts/build-images.sh set it, fetches it where the
# local Go is older), and the image only copies the one of its platform.
#
# (Each command on one line.)
#
# One platform, the Docker engine's (what `make image` and
# scripts/build-images.sh do; the legacy builder sets no TARGETARCH, so it
# is passed, and defaults to amd64 here):
#   CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH go build -trimpath
#     -ldflags="-s -w -X main.version=$VERSION"
#     -o bin/notification-worker-linux-$ARCH ./cmd/notification-worker
#   cp /etc/ssl/certs/ca-certificates.crt bin/
#   docker build --build-arg VERSION=$VERSION --build-arg TARGETARCH=$ARCH -t notification-worker:dev .
#
# Both platforms in one manifest list, with BuildKit (which sets TARGETOS
# and TARGETARCH for each platform itself; nothing runs in the image, so no
# emulator is needed):
#   for ARCH in amd64 arm64; do CGO_ENABLED=0 GOOS=linux GOARCH=$ARCH go build ...
#     -o bin/notification-worker-linux-$ARCH ./cmd/notification-worker; done
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$VERSION
#     -t REGISTRY/notification-worker:$VERSION --push .
#
# The version is linked into the binary (the start-up line and the
# notification_worker_build_info metric show it); the image carries it as
# a label too.
#
# Why not a multi-stage build with a golang base image: the machines this
# project builds on (CI included) reach no container registry, and
# `FROM scratch` is the only base that needs no pull. The binary is built by
# the host's Go toolchain, the same one the tests ran with (the toolchain
# comes through Go's module proxy, not a container registry).
FROM scratch

ARG VERSION=dev
# Set by BuildKit for the platform being built. No default on the ARG
# itself: BuildKit would then keep the default for every platform; the
# defaults are in the COPY below, for the legacy builder.
ARG TARGETOS
ARG TARGETARCH
LABEL org.opencontainers.image.version=$VERSION

# The worker dials TLS (Twilio, SMTP STARTTLS, rediss://); scratch has no
# trust store of its own.
COPY bin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY bin/notification-worker-${TARGETOS:-linux}-${TARGETARCH:-amd64} /notification-worker

# 65532 is the conventional "nonroot" id; scratch has no /etc/passwd, so it
# is given numerically.
USER 65532:65532

# HTTP_ADDR's default: /healthz, /readyz, /metrics.
EXPOSE 8080

ENTRYPOINT ["/notification-worker"]
