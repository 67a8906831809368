# Multi-stage build of this tree with Docker: a static walstream binary on a
# distroless base, non-root. A release's image is made without Docker, from
# the release's binaries (make release; docs/development.md, Releases); this
# builds one under the same name, e.g. for docker-compose.yml:
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/walstream/walstream:v0.1.0 .    (or: make image)
#
# .dockerignore keeps .git out of the context, so the version comes from the
# VERSION build argument (`walstream version` prints it), not from git.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/walstream ./cmd/walstream

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title=walstream org.opencontainers.image.version=${VERSION}
COPY --from=build /out/walstream /usr/local/bin/walstream
USER nonroot:nonroot
# walstream binds loopback by default; in a container, loopback is the
# container's own, and the port below would be unreachable. /metrics,
# /healthz and /readyz listen on every interface of the container instead:
# publish the port only where it should be reachable (compose binds it to
# the host's 127.0.0.1), or protect it with --http-config-file.
ENV WALSTREAM_HTTP_ADDR=0.0.0.0:9187
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/walstream"]
CMD ["run"]
