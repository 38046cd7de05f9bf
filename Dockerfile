# The cgpilot agent image, for users and release builds:
#
#   docker build -t ghcr.io/cgpilot/cgpilot-agent:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... --push .
#
# Two stages: a static Go binary (no cgo, no libc), copied onto distroless
# static, which holds only CA certificates, tzdata and /etc/passwd: no shell,
# no package manager. cgpilotctl comes along, so that on a node
#   kubectl exec -n cgpilot-system ds/cgpilot-agent -- cgpilotctl pools
# works through the agent's socket.
#
# The agent runs as root (uid 0), not as a non-root user: it writes the
# host's pod cgroup files (cpuset.cpus, cpu.cfs_quota_us or cpu.max, memory
# limits), which the kubelet creates owned by root with mode 0644 and
# delegates to no other uid. The DaemonSet drops every capability, so root
# writes them only as their owner (no CAP_DAC_OVERRIDE, no CAP_SYS_ADMIN).
#
# `make demo` builds the same binary with the same flags without Docker or a
# registry (test/images; TestDockerfileBuildsLikeTheDemo keeps them equal).
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/cgpilot-agent ./cmd/cgpilot-agent && \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/cgpilotctl ./cmd/cgpilotctl

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/cgpilot-agent /out/cgpilotctl /bin/
USER 0:0
ENTRYPOINT ["/bin/cgpilot-agent"]
