# Image for the API and worker processes of docker-compose.yml (SVC_ROLE picks the part).
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json ./
COPY bin ./bin
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
# Workflow code is bundled once at build time; workers load the bundle instead of re-bundling.
RUN node --import tsx src/main.ts bundle-workflows --out /app/workflow-bundle.js
ENV SVC_WORKFLOW_BUNDLE=/app/workflow-bundle.js PORT=8080 HOST=0.0.0.0
USER node
EXPOSE 8080
CMD ["node", "--import", "tsx", "src/main.ts", "api"]
