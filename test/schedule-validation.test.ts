import { ScheduleNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cronProblem, knownTimeZone } from '../src/workflow-definitions/schedule-spec.js';
import { startTestApp, type TestApp } from './helpers/app.js';

/**
 * A schedule trigger is saved with its Temporal Schedule or not at all: what Temporal would refuse
 * is a 400 before anything is saved, a new version of an active workflow is stored only when
 * Temporal took its schedule, and the service's own check agrees with the real server's.
 */

let app: TestApp;
const W = '/api/workflow/v1/workflows';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
});
afterAll(async () => app?.close());

const scheduled = (title: string, config: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  title,
  trigger: { type: 'schedule', config: { overlap: 'skip', ...config } },
  nodes: [{ id: 'tick', type: 'transform', config: { value: 1 } }],
  ...extra,
});
const saved = async (title: string) => (await app.sql('select count(*)::int as n from workflows where title = $1', [title]))[0]!.n as number;

/** Schedules Temporal refuses, and the field the answer names. */
const REFUSED: [Record<string, unknown>, string][] = [
  [{ cron: 'x x x x x' }, 'trigger.config.cron'],
  [{ cron: '@every 0s' }, 'trigger.config.cron'],
  [{ cron: '99 99 99 99 99' }, 'trigger.config.cron'],
  [{ cron: '0 0 1 1 * 1999' }, 'trigger.config.cron'],
  [{ cron: '0 30 9 * * 1-5' }, 'trigger.config.cron'],
  [{ cron: '*/0 * * * *' }, 'trigger.config.cron'],
  [{ cron: '@every 1ms' }, 'trigger.config.cron'],
  [{ cron: '@every 1h/2h' }, 'trigger.config.cron'],
  [{ cron: '* * * * * * * *' }, 'trigger.config.cron'],
  [{ cron: 'TZ=Not/AZone 0 0 * * *' }, 'trigger.config.cron'],
  [{ cron: '0 9 * * *', timezone: 'Not/AZone' }, 'trigger.config.timezone'],
  [{ cron: 'TZ=UTC 0 9 * * *', timezone: 'Europe/Paris' }, 'trigger.config.timezone'],
];

describe('a schedule Temporal would refuse', () => {
  it.each(REFUSED.map(([config, field]) => [JSON.stringify(config), config, field] as const))(
    '%s is 400 naming the field, and nothing is saved',
    async (_, config, field) => {
      for (const status of ['inactive', 'active']) {
        const title = `refused ${status} ${JSON.stringify(config)}`;
        const res = await app.admin.post(W, scheduled(title, config, { status }));
        expect(res.status, res.text).toBe(400);
        expect(res.body).toMatchObject({ error: 'validation_failed', data: { errors: [{ field }] } });
        expect(await saved(title)).toBe(0);
      }
    },
  );

  it('is not stored by a PATCH of an active workflow, whose schedule runs on unchanged', async () => {
    const created = await app.admin.post(W, scheduled('Hourly, then refused', { cron: '0 * * * *' }, { status: 'active' }));
    expect(created.status, created.text).toBe(201);
    const { id, version } = created.body.data;
    const handle = app.stack.services.temporal.client.schedule.getHandle(app.stack.services.temporal.scheduleId(id));
    const before = (await handle.describe()).spec;
    for (const [config] of REFUSED) {
      const res = await app.admin.patch(`${W}/${id}`, { trigger: { type: 'schedule', config } });
      expect(res.status, `${JSON.stringify(config)}: ${res.text}`).toBe(400);
    }
    // A zone the service's own check lets through (a link name in capitals) that Temporal
    // refuses: the version written in the transaction is rolled back all the same.
    const latecomer = await app.admin.patch(`${W}/${id}`, { trigger: { type: 'schedule', config: { cron: '0 9 * * *', timezone: 'US/EASTERN' } } });
    expect(latecomer.status, latecomer.text).toBe(400);
    expect(latecomer.body.data.errors[0]).toMatchObject({
      field: 'trigger.config.timezone',
      message: expect.stringMatching(/^Temporal refuses this schedule: unknown time zone/),
    });
    const after = (await app.admin.get(`${W}/${id}`)).body.data;
    expect(after).toMatchObject({ version, status: 'active', trigger: { config: { cron: '0 * * * *' } } });
    expect((await app.sql('select count(*)::int as n from workflow_versions where workflow_id = $1', [id]))[0]!.n).toBe(1);
    expect((await handle.describe()).spec).toEqual(before);
    // A schedule Temporal takes is stored with the new version.
    const good = await app.admin.patch(`${W}/${id}`, { trigger: { type: 'schedule', config: { cron: '30 2 * * *', timezone: 'Europe/Paris' } } });
    expect(good.status, good.text).toBe(200);
    expect(good.body.data.version).toBe(version + 1);
    expect((await handle.describe()).spec).toMatchObject({ timezone: 'Europe/Paris', calendars: [{ minute: [{ start: 30, end: 30, step: 1 }] }] });
  });

  it('saved before schedules were checked, answers 400 on activation, not 500, and stays inactive', async () => {
    const created = await app.admin.post(W, scheduled('Saved long ago', { cron: '0 * * * *' }));
    const id = created.body.data.id;
    await app.sql(`update workflows set trigger = jsonb_set(trigger, '{config,cron}', '"99 99 99 99 99"') where id = $1`, [id]);
    const res = await app.admin.post(`${W}/${id}/activate`);
    expect(res.status, res.text).toBe(400);
    expect(res.body).toMatchObject({
      error: 'validation_failed',
      data: { errors: [{ field: 'trigger.config.cron', message: expect.stringMatching(/^Temporal refuses this schedule: .*Minute/) }] },
    });
    expect((await app.admin.get(`${W}/${id}`)).body.data.status).toBe('inactive');
    await expect(app.stack.services.temporal.client.schedule.getHandle(app.stack.services.temporal.scheduleId(id)).describe()).rejects.toBeInstanceOf(
      ScheduleNotFoundError,
    );
  });
});

// Cron strings and time zones, good and bad, in every form Temporal's parser distinguishes.
const CRONS = [
  'x x x x x',
  '@every 0s',
  '99 99 99 99 99',
  '0 0 1 1 * 1999',
  '0 0 1 1 * 2101',
  '0 0 1 1 * 2050',
  '0 30 9 * * 1-5',
  '*/5 * * * *',
  '@daily',
  '@every 90s',
  '@every 1ms',
  '@every 1s',
  '@every -1s',
  '@every 1s/2s',
  '@every 1h/30m',
  '0 0 * * 8',
  '0 0 * * 7',
  '0 0 * * sun',
  '0 0 * jan *',
  '0 0 * ja *',
  '60 * * * *',
  '* * * * * * *',
  '* * * * * * * *',
  '1-5/0 * * * *',
  '5-1 * * * *',
  '@hourly',
  '@midnight',
  '@reboot',
  'TZ=Europe/Paris 0 0 * * *',
  'TZ=Not/AZone 0 0 * * *',
  '*/0 * * * *',
  '? * * * *',
  'L * * * *',
  '0 0 L * *',
  '@every 1d',
  '@every 1.5h',
  '@every 100000000h',
  '* * * * 0-7',
  '0 0 30 2 *',
  '@every 1s/0s',
  '@every 1s/5s',
  ' @hourly ',
  '@HOURLY',
  '0,  * * * *',
  '1,,2 * * * *',
  '- * * * *',
  '1- * * * *',
  '01 * * * *',
  '+1 * * * *',
  '0x1 * * * *',
  '@every 999ms',
  '@every 1500ms',
  '@every 1s/1s',
  '@every 2s/-1s',
  '@every 1h30m',
  '@every 1w',
  '@every .5h',
  '@every 1.s',
  '@every 0',
  '@every',
  '@every  5s',
  '@every 5',
  '@every 2562047h',
  '@every 2562048h',
  '@every 5s/',
  '@every 5s/1s/1s',
  'TZ= 0 0 * * *',
  'CRON_TZ=UTC 0 0 * * *',
  'TZ=UTC @every 1h',
  'TZ=UTC',
  'TZ=utc 0 0 * * *',
  'TZ=US/Eastern 0 0 * * *',
  'TZ=Local 0 0 * * *',
  'CRON_TZ=UTC @daily',
  '*/60 * * * *',
  '0-59/60 * * * *',
  '1/2 * * * *',
  '0 0 * * sun-sat',
  '0 0 * * mon-fri',
  '0 0 * * fri-mon',
  '0 0 * jan-dec *',
  '0 0 * JAN *',
  '0 0 * * Su',
  '0 0 * * s',
  '0 0 * * th',
  '0 0 * * tu',
  '0 0 * janu *',
  '0 0 * janx *',
  '0 0 1 1 * 2000-2100/10',
  '0 0 1 1 * *',
  '0 0 29 2 * 2001',
  '1-2-3 * * * *',
  '1/2/3 * * * *',
  '*/+2 * * * *',
  '*/-2 * * * *',
  '-1 * * * *',
  '0 -0 * * *',
  '99999999999999999999 * * * *',
  '* * * * */7',
  '0 0 * * 0/2',
  '0 0 * * 7-7',
  '0 0 * * 6-7',
  '0 0 0 * *',
  '0 0 * 0 *',
  '0 24 * * *',
  '59 23 31 12 7 2100',
  '60 59 23 31 12 7 2100',
  '59 59 23 31 12 7 2100',
  '0 0 1 * * 1999-2001',
  '*,* * * * *',
  '1-5,*/2 * * * *',
  '\t0 0 * * *',
  '0\t0 * * *\t*',
  '0 0 * * *  ',
  '@yearly',
  '@annually',
  '@monthly',
  '@weekly',
  '@every 1s ',
  '@every\t1s',
  '@everyday',
  '@every 1m30s/30s',
  '@every 1d/1d',
  '@every 0.5s/0s',
  '@every 3us',
  '@every 1000000000ns',
  '@every 1000000000.5ns',
];
const ZONES = [
  'Not/AZone',
  'Europe/Paris',
  'UTC',
  'utc',
  'Local',
  '',
  'EST',
  'US/Eastern',
  'us/eastern',
  'Etc/GMT+5',
  '+01:00',
  'EUROPE/PARIS',
  'Europe/Kyiv',
  'Europe/Kiev',
  'America/Nuuk',
  'Asia/Calcutta',
  'GMT',
  'Etc/UTC',
  'EST5EDT',
  'Factory',
  'posixrules',
  'Z',
  'Asia/Kolkata',
  'America/Argentina/ComodRivadavia',
  'Australia/ACT',
  'Etc/Unknown',
  '../etc/passwd',
  '/etc/localtime',
  'Europe/Paris ',
  'PST8PDT',
  'Japan',
  'ROK',
  'Zulu',
  'UCT',
  'GMT+0',
  'Etc/GMT+14',
  'Etc/GMT-14',
  'Etc/GMT+15',
];
/** Taken by Temporal, refused by the service on purpose: the Temporal server machine's own zone, tzdata internals. */
const STRICTER = new Set(['TZ=Local 0 0 * * *', 'zone:Local', 'zone:Factory', 'zone:posixrules']);

describe("the service's check of a schedule", () => {
  it("agrees with the Temporal server's on every form", async () => {
    const client = app.stack.services.temporal.client;
    const temporalRefuses = async (spec: { cronExpressions: string[]; timezone?: string }) => {
      const scheduleId = `${app.stack.services.temporal.scheduleId(0)}-probe-${Math.random().toString(36).slice(2)}`;
      try {
        await client.schedule.create({
          scheduleId,
          spec,
          action: { type: 'startWorkflow', workflowType: 'probe', taskQueue: 'probe', args: [] },
          state: { paused: true },
        });
      } catch (err) {
        return (err as Error).message;
      }
      await client.schedule.getHandle(scheduleId).delete();
      return undefined;
    };
    const disagreements: string[] = [];
    for (const cron of CRONS) {
      const theirs = await temporalRefuses({ cronExpressions: [cron] });
      const ours = cronProblem(cron);
      if (Boolean(theirs) !== Boolean(ours) && !STRICTER.has(cron))
        disagreements.push(`${JSON.stringify(cron)}: Temporal ${theirs ?? 'takes it'}, the service ${ours ?? 'takes it'}`);
    }
    for (const zone of ZONES) {
      const theirs = await temporalRefuses({ cronExpressions: ['0 0 * * *'], timezone: zone });
      const ours = !knownTimeZone(zone);
      if (Boolean(theirs) !== ours && !STRICTER.has(`zone:${zone}`))
        disagreements.push(`zone ${JSON.stringify(zone)}: Temporal ${theirs ?? 'takes it'}, the service ${ours ? 'refuses it' : 'takes it'}`);
    }
    expect(disagreements).toEqual([]);
  });
});
