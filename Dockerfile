# ORBIT server on the official Deno image, run from source as the image's non-root `deno`
# user, on SQLite in the /data volume unless ORBIT_DB says otherwise.
#
#   docker build -t orbit .
#   docker run -d -p 7233:7233 -v orbit-data:/data -e ORBIT_TOKEN=secret orbit
#   docker run -d -p 7233:7233 -e ORBIT_DB=postgres://orbit@db/orbit orbit
#
# The image is not built where the tests run, so every RUN below is one that
# tests/dockerfile_test.ts runs on a copy of the build context (after .dockerignore), and the
# test starts the CMD and runs the HEALTHCHECK against it. Keep it that way.
FROM denoland/deno:2.9.6

# The database volume, owned by the user the server runs as.
RUN mkdir -p /data && chown deno:deno /data

WORKDIR /app

# Dependencies first, so their layer survives source changes: the npm packages of deno.json,
# exactly as deno.lock pins them, into the image's DENO_DIR (/deno-dir, owned by `deno`).
COPY deno.json deno.lock ./
USER deno
RUN deno install --frozen

# The source stays owned by root: the server cannot change its own code.
COPY . .
RUN deno cache --frozen main.ts deploy/healthcheck.ts

ENV ORBIT_ADDR=0.0.0.0:7233 ORBIT_DB=/data/orbit.db
EXPOSE 7233
VOLUME /data

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["deno", "run", "--cached-only", "--allow-net", "--allow-env", "deploy/healthcheck.ts"]

# `docker stop` sends SIGTERM: the server stops gracefully. --unstable-no-legacy-abort is in
# deno.json too; it is repeated so the command means the same without the config file.
# --v8-flags: V8's young generation capped at 8 MB a semi-space, and the old generation let grow
# to 1.5 times what the last full collection kept (not 2-4 times), keep the heap small under
# bursts of starts, for no loss of speed (docs/performance-log.md, "Many waiting executions").
CMD ["deno", "run", "-A", "--cached-only", "--frozen", "--unstable-no-legacy-abort", "--v8-flags=--max-semi-space-size=8,--heap-growing-percent=50", "main.ts", "server"]
