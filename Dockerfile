# syntax=docker/dockerfile:1
# The gpucached image: a static binary on distroless, run as non-root.
#
#   docker build -t gpucached:0.1.0 .
#
# Stage 1 runs deploy/docker/build.sh (CGO_ENABLED=0, -trimpath); stage 2
# holds that binary alone on gcr.io/distroless/static-debian12:nonroot (no
# shell, no libc, CA certificates and /etc/passwd only), as uid 65532. The
# image is not built in this repository's CI (no container runtime there):
# deploy/check TestImageBuildScript runs the build script and checks its
# binary, and TestDockerfile checks this file's stages. See docs/OPERATIONS.md
# ("Kubernetes") and docs/adr/0029-helm-chart-and-image.md.
#
# The go line of go.mod (1.26.8) makes an older golang:1.26 image fetch that
# toolchain from the Go module proxy; the build needs the proxy in any case.

ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# The whole context, then the one build step: the module cache and the
# build cache persist between builds (BuildKit cache mounts), so a source
# change rebuilds in seconds without a separate go mod download layer,
# whatever go.mod files the repository's modules have.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    deploy/docker/build.sh /out

FROM ${BASE_IMAGE}
COPY --from=build /out/gpucached /gpucached
USER 65532:65532
# data (listen) and admin (admin_listen: /healthz, /readyz, /metrics); the
# chart binds them on 0.0.0.0 with its config.
EXPOSE 9400 9401
ENTRYPOINT ["/gpucached"]
