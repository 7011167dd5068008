# Build a static binary, then ship it alone in a distroless non-root image.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#                --build-arg COMMIT=$(git rev-parse HEAD) -t trendgate .
#
# .dockerignore keeps .git out of the build context, so Go cannot read the
# commit itself: VERSION and COMMIT are stamped into the binary with -X
# (what "trendgate version" and trendgate_build_info report). Left empty,
# they read "(devel)" and "unknown".
FROM golang:1.26-bookworm AS build
ARG VERSION=""
ARG COMMIT=""
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X trendgate/internal/buildinfo.version=${VERSION} -X trendgate/internal/buildinfo.commit=${COMMIT}" \
      -o /out/trendgate ./cmd/trendgate
# The state directory (state.path, keys_file, cache.persist_path in
# docs/deploy.md's examples), owned by nonroot so that a named volume
# mounted there starts writable.
RUN mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/trendgate /usr/local/bin/trendgate
COPY --from=build --chown=65532:65532 /out/state /var/lib/trendgate
USER nonroot:nonroot
EXPOSE 8080 9090
# The health check reads admin.listen from the same file the server uses
# (mount the directory /etc/trendgate, see docs/deploy.md), so moving the admin
# listener does not break it; admin.listen must not be "off".
HEALTHCHECK --interval=15s --timeout=3s --retries=3 \
  CMD ["/usr/local/bin/trendgate", "healthcheck", "-config", "/etc/trendgate/config.yaml"]
ENTRYPOINT ["/usr/local/bin/trendgate"]
CMD ["serve", "-config", "/etc/trendgate/config.yaml"]
