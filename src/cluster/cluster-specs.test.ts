import { describe, expect, it } from 'vitest';
import { ConfigError } from '../config.js';
import type { ClusterPorts } from './cluster-specs.js';
import { checkMembershipPorts, mask, portsToCheck, postgresEnv, serviceEnv, tagLine, temporalServerSpec, temporalUiSpec } from './cluster-specs.js';

const ports: ClusterPorts = {
  api: [8080, 8081],
  postgres: 5488,
  temporal: 7233,
  temporalHistory: 7234,
  temporalMatching: 7235,
  temporalWorker: 7239,
  membership: { frontend: 6933, history: 6934, matching: 6935, worker: 6939 },
  temporalMetrics: 7240,
  workerMetrics: [9464, 'off'],
  ui: 8233,
};

const layout = {
  files: '/repo/deploy',
  logDir: '/data/logs',
  projectRoot: '/repo',
  baseChildEnv: { PATH: '/bin', HOME: '/home/u' },
  temporalAddress: '127.0.0.1:7233',
};

describe('the ports of the one-machine cluster', () => {
  it('refuses membership ports Temporal cannot store (smallint)', () => {
    expect(() => checkMembershipPorts(ports)).not.toThrow();
    const high = { ...ports, membership: { ...ports.membership, worker: 32_768 } };
    expect(() => checkMembershipPorts(high)).toThrow(ConfigError);
    expect(() => checkMembershipPorts(high)).toThrow(/6933, 6934, 6935, 32768.*between 1 and 32767/);
  });

  it('names each port to check by the setting that moves it, leaving out metrics that are off', () => {
    expect(portsToCheck(ports)).toEqual([
      ['Temporal (TEMPORAL_PORT)', 7233],
      ['Temporal Web UI (TEMPORAL_UI_PORT)', 8233],
      ['API 1 (PORT)', 8080],
      ['API 2 (PORT + 1)', 8081],
      ["worker 1's metrics (SVC_METRICS_PORT)", 9464],
    ]);
  });
});

describe("the cluster's children", () => {
  it('reach PostgreSQL with the decoded credentials of its URL, on 5432 by default', () => {
    expect(postgresEnv('postgres://svc%40x:p%3Ass@db.local/svc')).toEqual({
      POSTGRES_SEEDS: 'db.local',
      DB_PORT: '5432',
      POSTGRES_USER: 'svc@x',
      POSTGRES_PWD: 'p:ss',
    });
    expect(postgresEnv('postgres://u:p@127.0.0.1:5488/x').DB_PORT).toBe('5488');
  });

  it('masks the password of a database URL', () => {
    expect(mask('postgres://postgres:secret@127.0.0.1:5488/svc')).toBe('postgres://postgres:***@127.0.0.1:5488/svc');
  });

  it("run Temporal's server on the cluster's ports with its files' dynamic config", () => {
    const spec = temporalServerSpec(layout, '/bin/temporal-server', ports, { POSTGRES_SEEDS: '127.0.0.1' });
    expect(spec.args).toEqual(['--root', '/', '--config', '/repo/deploy', '--env', 'temporal-server', '--allow-no-auth', 'start']);
    expect(spec.env).toMatchObject({
      PATH: '/bin',
      POSTGRES_SEEDS: '127.0.0.1',
      FRONTEND_GRPC_PORT: '7233',
      WORKER_GRPC_PORT: '7239',
      WORKER_MEMBERSHIP_PORT: '6939',
      PROMETHEUS_ENDPOINT: '127.0.0.1:7240',
      DYNAMIC_CONFIG_FILE_PATH: '/repo/deploy/temporal-dynamicconfig.yaml',
    });
    expect(spec.logFile).toBe('/data/logs/temporal-server.log');
  });

  it("point the Web UI's codec at API 1", () => {
    const spec = temporalUiSpec(layout, '/bin/ui-server', ports, { url: 'http://localhost:8233', namespace: 'default' });
    expect(spec.env).toMatchObject({
      TEMPORAL_ADDRESS: '127.0.0.1:7233',
      TEMPORAL_UI_PORT: '8233',
      TEMPORAL_DEFAULT_NAMESPACE: 'default',
      TEMPORAL_CODEC_ENDPOINT: 'http://localhost:8080/api/temporal-codec',
    });
  });

  it("give API and worker processes the user's environment with the cluster's endpoints, never another role", () => {
    const env = serviceEnv(
      { FOO: 'bar', SVC_ROLE: 'api', SVC_DATA_DIR: '/x', TEMPORAL_CLI: '/t', DATABASE_URL: 'postgres://elsewhere' },
      { databaseUrl: 'postgres://db', temporalAddress: '127.0.0.1:7233', uiUrl: 'http://ui', host: '127.0.0.1', encryptionKey: 'k', workflowBundle: '/b.js' },
      { PORT: '8080' },
    );
    expect(env).toEqual({
      FOO: 'bar',
      DATABASE_URL: 'postgres://db',
      TEMPORAL_ADDRESS: '127.0.0.1:7233',
      TEMPORAL_UI_URL: 'http://ui',
      HOST: '127.0.0.1',
      SVC_ENCRYPTION_KEY: 'k',
      SVC_WORKFLOW_BUNDLE: '/b.js',
      PORT: '8080',
    });
  });

  it('tag JSON log lines with their process and pass other lines as they are', () => {
    expect(JSON.parse(tagLine('api-1', '{"level":30,"msg":"up"}'))).toEqual({ process: 'api-1', level: 30, msg: 'up' });
    expect(tagLine('api-1', 'plain text')).toBe('plain text');
  });
});
