# syntax=docker/dockerfile:1
# jobcast: `docker build -t jobcast .` from the repository root.
# Stage 1 builds the release binary with the project's toolchain; stage 2
# is a slim Debian with only the shared libraries the binary links
# (libstdc++, libssl, zlib) and runs `jobcast serve` as an unprivileged user.

FROM rust:1.95-bookworm AS build
# libclang for RocksDB's bindgen, a C/C++ toolchain for the bundled RocksDB
# and librdkafka, pkg-config, OpenSSL and zlib headers for librdkafka.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libclang-dev clang g++ make pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p jobcast-cli --bin jobcast \
    && install -D -s target/release/jobcast /out/jobcast

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 libstdc++6 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 jobcast \
    && useradd --system --uid 10001 --gid jobcast --home-dir /var/lib/jobcast --shell /usr/sbin/nologin jobcast \
    && install -d -o jobcast -g jobcast -m 0750 /var/lib/jobcast
COPY --from=build /out/jobcast /usr/local/bin/jobcast
# In a container the API must listen beyond loopback; the state lives on
# the volume. Both can still be overridden by --config, flags or env.
ENV JOBCAST_HTTP=0.0.0.0:8080 \
    JOBCAST_DATA_DIR=/var/lib/jobcast/state
USER 10001:10001
WORKDIR /var/lib/jobcast
VOLUME ["/var/lib/jobcast"]
EXPOSE 8080
# SIGTERM finishes and commits the batch in hand, then exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/jobcast"]
CMD ["serve"]
