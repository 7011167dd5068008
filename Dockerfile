# Build a static binary, then ship it alone in a distroless non-root image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/trendgate ./cmd/trendgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/trendgate /usr/local/bin/trendgate
USER nonroot:nonroot
EXPOSE 8080 9090
HEALTHCHECK --interval=15s --timeout=3s --retries=3 \
  CMD ["/usr/local/bin/trendgate", "healthcheck", "-url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["/usr/local/bin/trendgate"]
CMD ["serve", "-config", "/etc/trendgate/config.yaml"]
