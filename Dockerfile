# syntax=docker/dockerfile:1
# One image for every gateway node: `docker compose build` builds it once, both nodes run it.
# The gateway runs its TypeScript through tsx (a runtime dependency, as for `npm start`): no build
# step to keep in sync with the source, and start-up transpiles in well under a second.
# Node 22 LTS: inside package.json's engines range (^20.19.0 || ^22.13.0 || >=24).
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# patch-package applies them at install (postinstall): pinned versions, see patches/README.md
COPY patches ./patches
# exactly the lockfile, without dev tools (vitest, typescript, bench and test libraries)
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE}
# MALLOC_MMAP_THRESHOLD_: Node gives every TLS connection a 64 KiB input buffer (its NodeBIO, sized by
# libuv's 64 KiB read hint) of which only the first page or two is ever written; from its own
# mapping the rest stays untouched, where in the shared heap it lands on pages other allocations
# dirtied: about 4 KiB less resident memory per MQTT connection (docs/decisions.md, issue 19).
ENV NODE_ENV=production \
    DATA_DIR=/app/data \
    CERTS_DIR=/app/certs \
    MALLOC_MMAP_THRESHOLD_=65536
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json tsconfig.json ./
COPY src ./src
COPY machines ./machines
# The PKI and data folders belong to the unprivileged user; an empty named volume mounted there
# takes this ownership, so the gateway can write its CA without running as root.
RUN mkdir -p /app/data /app/certs && chown node:node /app/data /app/certs
USER node
EXPOSE 8080 8883
# node itself as PID 1 (not npm) so SIGTERM reaches the gateway's graceful shutdown
CMD ["node", "--import", "tsx", "src/main.ts"]
