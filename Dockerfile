# The ci-job-telemetry service image (docker-compose.yml builds it; deploy/kubernetes runs it).
FROM node:26.10-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json nest-cli.json ./
COPY src ./src
RUN npm run -s build && npm prune --omit=dev

FROM node:26.10-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY config ./config
# The job-payload request is validated against the OpenAPI document at start (src/job-payload).
COPY openapi/openapi.yaml ./openapi/openapi.yaml
# Without OTLP_UPSTREAM_URL the service keeps exports under DATA_DIR (default .data): the one place it writes.
RUN mkdir -p /app/.data && chown node:node /app/.data
USER node
EXPOSE 8080 4318
CMD ["node", "dist/main.js"]
