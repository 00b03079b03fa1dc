# Damselfly: multi-stage build, slim runtime, non-root user, data in /data.
#
#   docker build -t damselfly .
#   docker run -p 6379:6379 -v damselfly-data:/data damselfly
#
# Runs under Docker's and Kubernetes' default seccomp profiles: io_uring is probed and, when
# blocked, the epoll backend is used (one WARN line). No locked memory needed.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p damselfly \
    && cp target/release/damselfly /damselfly

FROM debian:bookworm-slim
# A fixed numeric id, so volume ownership means the same on every host.
RUN groupadd --system --gid 10001 damselfly \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin damselfly \
    && mkdir -p /data/sock \
    && chown -R 10001:10001 /data
COPY --from=build /damselfly /usr/local/bin/damselfly
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 6379
ENTRYPOINT ["damselfly"]
CMD ["--bind", "0.0.0.0", "--dir", "/data"]
