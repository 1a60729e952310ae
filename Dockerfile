# syntax=docker/dockerfile:1
# work-ledger: build with the Rust toolchain, run on a slim Debian.
# In this image the server always uses DATABASE_URL (there are no PostgreSQL
# server binaries for the embedded mode); see docker-compose.yml.

FROM rust:1-bookworm AS builder
# Temporal's client compiles Temporal's gRPC protos with protoc and its
# well-known types.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the target folder between builds; the
# binary is copied out of the cached target folder in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin work-ledger \
    && install -m 0755 target/release/work-ledger /usr/local/bin/work-ledger

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --user-group --create-home --home-dir /var/lib/work-ledger work-ledger
COPY --from=builder /usr/local/bin/work-ledger /usr/local/bin/work-ledger
USER work-ledger
WORKDIR /var/lib/work-ledger
ENV WORK_LEDGER_LISTEN=0.0.0.0:8080
EXPOSE 8080
# `docker compose exec -T work-ledger work-ledger token create ...` uses the same binary.
ENTRYPOINT ["work-ledger"]
CMD ["serve"]
