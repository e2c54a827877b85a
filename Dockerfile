# syntax=docker/dockerfile:1
# Builds the agentsaga worker and starter into one small image (used by
# docker-compose.yml for both the worker and the sandbox).
#
#   docker build -t agentsaga .
#   docker run agentsaga                    # /app/worker
#   docker run --entrypoint /app/starter agentsaga sandbox serve --addr 0.0.0.0:8090

# pin with deploy/pin-images.sh
FROM golang:1.26.8-alpine AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/worker ./worker && \
    go build -trimpath -ldflags="-s -w" -o /out/starter ./starter && \
    mkdir -p /out/data

# pin with deploy/pin-images.sh
FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/worker /out/starter /app/
# A data directory owned by the runtime user, for a volume mounted there.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENTRYPOINT ["/app/worker"]
