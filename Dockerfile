# For users with Docker. The build machines have no Docker engine and build
# the same image (a static binary on scratch) with hack/images.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/daytwo-dev/daytwo/internal/version.Version=${VERSION}" \
    -o /daytwo ./cmd/daytwo

FROM scratch
COPY --from=build /daytwo /daytwo
USER 65532:65532
ENTRYPOINT ["/daytwo"]
