# syntax=docker/dockerfile:1
#
# nora-breaker image: a static Go binary on distroless, running as the
# distroless "nonroot" user (uid/gid 65532). Build with
#   docker build --build-arg VERSION=$(git describe --tags --always) -t nora-breaker .
# The go build line must stay identical to scripts/build.sh (a test compares them).

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so editing sources does not invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nora-breaker .

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/nora-breaker /nora-breaker
# Same path as NORA's own image, so one mounted config.toml serves both. The
# file must exist: a path named by NORA_CONFIG_PATH that cannot be read is a
# configuration error (exit 2), never a silent fall back to defaults.
ENV NORA_CONFIG_PATH=/etc/nora/config.toml
# 3128: forward proxy; 9128: metrics, /health, /ready and the breaker API.
# Both listen on loopback unless the config (or NORA_SIDECAR_LISTEN /
# NORA_SIDECAR_ADMIN_LISTEN) says otherwise: a sidecar wants loopback, a
# shared proxy sets 0.0.0.0 together with deny_unlisted.
EXPOSE 3128 9128
USER nonroot:nonroot
ENTRYPOINT ["/nora-breaker"]
CMD ["serve"]
