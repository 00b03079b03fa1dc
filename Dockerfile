# Damselfly: multi-stage build, slim runtime, non-root user, data in /data.
#
#   docker build -t damselfly .
#   docker run -p 6379:6379 -v damselfly-data:/data damselfly
#
# Runs under Docker's and Kubernetes' default seccomp profiles: io_uring is probed and, when
# blocked, the epoll backend is used (one WARN line). No locked memory needed. Runs with a
# read-only root filesystem: the server writes only under /data (deploy/kubernetes).

FROM rust:1.95-slim-bookworm AS build
# make builds jemalloc (tikv-jemalloc-sys); the slim image has a C compiler but no make.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p damselfly \
    && cp target/release/damselfly /damselfly

FROM debian:bookworm-slim
# redis-cli (Debian's redis-tools) runs the Kubernetes probes in deploy/kubernetes and is at
# hand for `kubectl exec ... redis-cli`. Not pinned to a Debian revision (DL3008): bookworm's
# security updates replace redis-tools' revision, and a pin would then break the build.
# A fixed numeric id for the user, so volume ownership means the same on every host; the
# Kubernetes manifests run as (and set fsGroup to) the same 10001:10001.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-tools \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 damselfly \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin damselfly \
    && mkdir -p /data/sock \
    && chown -R 10001:10001 /data
COPY --from=build /damselfly /usr/local/bin/damselfly
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 6379
ENTRYPOINT ["damselfly"]
# Reached from outside the container: Redis's protected mode would refuse every client while
# the default user has no password (set one, or keep protected mode off behind a network
# you trust).
CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
