# syntax=docker/dockerfile:1
# cdplane's image, for those who build with a container engine: every cdplane binary in
# /usr/local/bin on distroless cc-debian12 (glibc 2.36 and the C++ runtime libstdc++6/libgcc-s1
# that the host driver's nvidia-imex needs in the daemon container, CA certificates, users root,
# nobody and nonroot 65532; default user root, as the kubelet plugin and IMEX daemons need).
# `make image` builds the equivalent image without an engine or a registry, for linux/amd64 and
# linux/arm64 (hack/image: the same binaries, on a base assembled from the Debian packages pinned
# in hack/image/packages.lock). The version is internal/version/VERSION; tag the image with it:
#
#   docker build --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t cdplane:$(cat internal/version/VERSION) .
#   docker buildx build --platform linux/amd64,linux/arm64 ...   # both, the other one emulated
#
# No test builds this file (no engine there); test/image checks that it builds and copies exactly
# the commands under cmd/, split by cgo as hack/image splits them.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG COMMIT=unknown
# Go's default C flags without go-nvml's hundreds of deprecation warnings.
ENV CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
ENV GOFLAGS="-trimpath -buildvcs=false"
RUN CGO_ENABLED=0 go build -ldflags "-s -w -buildid= -X cdplane/internal/version.Commit=${COMMIT}" -o /out/ ./cmd/cdplane ./cmd/cdplane-controller
RUN CGO_ENABLED=1 go build -ldflags "-s -w -buildid= -X cdplane/internal/version.Commit=${COMMIT}" -o /out/ ./cmd/cdplane-daemon ./cmd/cdplane-kubelet-plugin ./cmd/cdplane-nvml

# The distroless base by tag (it runs as root; the :nonroot variant would break the kubelet
# plugin); pin it by digest where you build: FROM gcr.io/distroless/cc-debian12@sha256:<digest>.
FROM gcr.io/distroless/cc-debian12
COPY --from=build /out/cdplane /out/cdplane-controller /out/cdplane-daemon /out/cdplane-kubelet-plugin /out/cdplane-nvml /usr/local/bin/
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 0
