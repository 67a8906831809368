# Multi-stage build: a static walstream binary on a distroless base, non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/walstream ./cmd/walstream

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/walstream /usr/local/bin/walstream
USER nonroot:nonroot
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/walstream"]
CMD ["run"]
