import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signApprovalToken } from '../src/approvals/approval-tokens.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { launchChromium } from './helpers/browser.js';
import { eventually } from './helpers/http-target.js';

/**
 * The approver's page, in a real browser (headless Chromium through playwright-core): GET and
 * HEAD only show, the form's POST decides; the per-approver signed link dies with its action and
 * once its approver decided; an altered or foreign token decides nothing; the page sends
 * no-referrer, a strict CSP and X-Frame-Options: DENY.
 */

let app: TestApp;
let browser: Browser;
let owner: TestUser;
let manager: TestUser;
let finance: TestUser;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
const A = '/api/agent/v1/actions';
const PAGE = '/api/workflow/v1/approvals';

beforeAll(async () => {
  [app, browser] = await Promise.all([startTestApp({ worker: true }), launchChromium()]);
  owner = await app.createUser('editor', 'ada');
  manager = await app.createUser('editor', 'grace');
  finance = await app.createUser('editor', 'linus');
});
afterAll(async () => {
  await browser?.close();
  await app?.close();
});

async function approvalRun(config: Record<string, unknown> = {}) {
  const workflow = await owner.client.post(W, {
    title: `page ${Math.random()}`,
    trigger: { type: 'manual' },
    nodes: [
      {
        id: 'manager',
        type: 'approval',
        config: {
          summary: 'Expense of {{ trigger.amount }} EUR <b>by</b> {{ trigger.by }}',
          details: 'Flight to the conference; receipt attached.',
          fields: { amount: '{{ trigger.amount }}', purpose: 'Conference', category: 'travel', refundable: false },
          editable: {
            type: 'object',
            properties: {
              amount: { type: 'number', minimum: 0, maximum: 2000 },
              category: { enum: ['travel', 'training'] },
              refundable: { type: 'boolean' },
            },
          },
          approvers: { users: ['grace', 'linus'] },
          timeout_ms: 120_000,
          ...config,
        },
      },
      { id: 'pay', type: 'transform', config: { value: '{{ nodes.manager.fields }}' } },
    ],
    edges: [{ from: 'manager', to: 'pay', branch: 'approved' }],
  });
  expect(workflow.status, workflow.text).toBe(201);
  const run = (await owner.client.post(`${W}/${workflow.body.data.id}/run`, { payload: { amount: 1800, by: 'ada' } })).body.data.execution_id as number;
  const [action] = await eventually(
    async () => {
      const rows = await app.sql<{ action_id: string }>('select action_id from agent_actions where execution_id = $1', [run]);
      return rows.length ? rows : undefined;
    },
    60_000,
    'the approval',
  );
  return { run, actionId: action!.action_id };
}

/** The approver's own link, as the action endpoint hands it to them. */
async function linkOf(user: TestUser, actionId: string): Promise<string> {
  const view = await user.client.get(`${A}/${actionId}`);
  expect(view.status, view.text).toBe(200);
  expect(view.body.data.approve_url).toMatch(new RegExp(`^${app.url}${PAGE}/`));
  return view.body.data.approve_url as string;
}

const pathOf = (url: string) => new URL(url).pathname;
const stored = async (actionId: string) => ({
  status: (await app.sql<{ status: string }>('select status from agent_actions where action_id = $1', [actionId]))[0]!.status,
  votes: (await app.sql('select 1 from agent_action_votes where action_id = $1', [actionId])).length,
});

async function finished(executionId: number) {
  return eventually(
    async () => {
      const v = (await app.admin.get(`${E}/${executionId}`)).body.data;
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to finish`,
  );
}

describe("the approver's page", () => {
  it('GET and HEAD show and change nothing; the answers carry no-referrer, a strict CSP and DENY', async () => {
    const { actionId } = await approvalRun();
    const link = await linkOf(manager, actionId);
    for (let i = 0; i < 3; i++) {
      const page = await app.anonymous.get(pathOf(link));
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.headers.get('referrer-policy')).toBe('no-referrer');
      expect(page.headers.get('x-frame-options')).toBe('DENY');
      expect(page.headers.get('cache-control')).toBe('no-store');
      const csp = page.headers.get('content-security-policy')!;
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("form-action 'self'");
      expect(csp).not.toContain('unsafe-inline');
      expect(page.text).not.toContain('<script');
      // What the run wrote is shown as text, never as markup.
      expect(page.text).toContain('Expense of 1800 EUR &lt;b&gt;by&lt;/b&gt; ada');
      expect(page.text).toContain('id="f-amount"');
    }
    const head = await fetch(link, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('referrer-policy')).toBe('no-referrer');
    expect(await stored(actionId)).toEqual({ status: 'pending', votes: 0 });
  });

  it('in a browser: a value outside the schema shows the form again and decides nothing; then the approval goes through and the run goes on', async () => {
    const { run, actionId } = await approvalRun({ required: 1 });
    const link = await linkOf(manager, actionId);
    const context = await browser.newContext();
    const page = await context.newPage();
    const violations: string[] = [];
    page.on('console', (m) => void (/Content.Security.Policy/i.test(m.text()) && violations.push(m.text())));
    const opened = await page.goto(link);
    expect(opened!.status()).toBe(200);
    expect(await page.title()).toBe('Approval: Expense of 1800 EUR <b>by</b> ada');
    await expect(page.locator('h1').textContent()).resolves.toBe('Expense of 1800 EUR <b>by</b> ada');
    expect(await page.locator('#f-amount').inputValue()).toBe('1800');
    expect(await page.locator('#f-category').inputValue()).toBe('travel');
    // Not editable: shown, not an input.
    expect(await page.locator('#f-purpose').count()).toBe(0);
    expect(await page.locator('input, select, textarea').count()).toBe(4);
    await expect(page.locator('body').textContent()).resolves.toContain('Conference');

    await page.fill('#f-amount', '9000');
    const refused = await Promise.all([page.waitForNavigation(), page.click('button[value="approve"]')]);
    expect(refused[0]!.status()).toBe(422);
    await expect(page.locator('.errors').textContent()).resolves.toContain('fields.amount');
    expect(await page.locator('#f-amount').inputValue()).toBe('9000');
    expect(await stored(actionId)).toEqual({ status: 'pending', votes: 0 });

    await page.fill('#f-amount', '1200');
    await page.selectOption('#f-category', 'training');
    await page.check('#f-refundable');
    await page.fill('textarea[name="note"]', 'Cheaper flight found');
    const approved = await Promise.all([page.waitForNavigation(), page.click('button[value="approve"]')]);
    expect(approved[0]!.status()).toBe(200);
    await expect(page.locator('h1').textContent()).resolves.toBe('Approved');
    expect(violations).toEqual([]);
    await context.close();

    const done = await finished(run);
    const output = done.timeline.find((t: { node_id: string }) => t.node_id === 'manager').output;
    expect(output).toMatchObject({
      decision: 'approved',
      fields: { amount: 1200, category: 'training', refundable: true, purpose: 'Conference' },
      decided_by: [{ login: 'grace', decision: 'approved', note: 'Cheaper flight found' }],
    });
    // The link is dead once its approver decided: showing it and posting it again answer 409.
    expect((await app.anonymous.get(pathOf(link))).status).toBe(409);
    const again = await app.anonymous.post(pathOf(link), undefined, { form: { decision: 'reject' } });
    expect(again.status).toBe(409);
    expect(again.headers.get('content-security-policy')).toContain("default-src 'none'");
  });

  it('in a browser: rejecting from the page rejects the run', async () => {
    const { run, actionId } = await approvalRun();
    const page = await browser.newPage();
    await page.goto(await linkOf(finance, actionId));
    await page.fill('textarea[name="note"]', 'No receipt');
    const [answer] = await Promise.all([page.waitForNavigation(), page.click('button[value="reject"]')]);
    expect(answer!.status()).toBe(200);
    await expect(page.locator('h1').textContent()).resolves.toBe('Rejected');
    await page.close();
    const output = (await finished(run)).timeline.find((t: { node_id: string }) => t.node_id === 'manager').output;
    expect(output).toMatchObject({ decision: 'rejected', decided_by: [{ login: 'linus', note: 'No receipt' }] });
  });

  it('each approver has a link of their own; two of them approve a double approval', async () => {
    const { run, actionId } = await approvalRun({ required: 2 });
    const [mine, theirs] = [await linkOf(manager, actionId), await linkOf(finance, actionId)];
    expect(mine).not.toBe(theirs);
    expect((await app.anonymous.post(pathOf(mine), undefined, { form: { decision: 'approve' } })).status).toBe(200);
    expect(await stored(actionId)).toEqual({ status: 'pending', votes: 1 });
    expect((await app.anonymous.post(pathOf(mine), undefined, { form: { decision: 'approve' } })).status).toBe(409);
    expect((await app.anonymous.post(pathOf(theirs), undefined, { form: { decision: 'approve' } })).status).toBe(200);
    expect((await finished(run)).status).toBe('success');
  });

  it('an altered, foreign, expired or self-approving token decides nothing', async () => {
    const { actionId } = await approvalRun();
    const link = pathOf(await linkOf(manager, actionId));
    const [prefix, user, expiry, signature] = link.slice(PAGE.length + 1).split('.') as [string, string, string, string];
    const flip = (s: string) => (s[0] === 'A' ? 'B' : 'A') + s.slice(1);
    const tries = [
      `${prefix}.${user}.${expiry}.${flip(signature)}`,
      `${prefix}.${(parseInt(user, 36) + 1).toString(36)}.${expiry}.${signature}`,
      `${prefix}.${user}.${(parseInt(expiry, 36) + 3600).toString(36)}.${signature}`,
      'not-a-token',
      `${prefix}.${user}.${expiry}`,
    ];
    for (const token of tries) {
      for (const answer of [
        await app.anonymous.get(`${PAGE}/${token}`),
        await app.anonymous.post(`${PAGE}/${token}`, undefined, { form: { decision: 'approve' } }),
      ]) {
        expect(answer.status, token).toBe(404);
        expect(answer.text).not.toContain('<form');
      }
    }
    const keys = app.stack.services.keys;
    const expiresAt = Math.ceil(Date.now() / 1000) + 3600;
    // Signed by the service, but for the run's owner: self-approval is off, on this path too.
    const ownerToken = signApprovalToken(keys, { actionId, userId: owner.id, expiresAt });
    expect((await app.anonymous.get(`${PAGE}/${ownerToken}`)).status).toBe(403);
    expect((await app.anonymous.post(`${PAGE}/${ownerToken}`, undefined, { form: { decision: 'approve' } })).status).toBe(403);
    // And for an administrator who is no approver of it.
    expect((await app.anonymous.get(`${PAGE}/${signApprovalToken(keys, { actionId, userId: 1, expiresAt })}`)).status).toBe(403);
    const expired = signApprovalToken(keys, { actionId, userId: manager.id, expiresAt: Math.floor(Date.now() / 1000) - 1 });
    expect((await app.anonymous.get(`${PAGE}/${expired}`)).status).toBe(410);
    expect((await app.anonymous.post(`${PAGE}/${expired}`, undefined, { form: { decision: 'approve' } })).status).toBe(410);
    expect(await stored(actionId)).toEqual({ status: 'pending', votes: 0 });
  });

  it('the link dies with its action: after the deadline the page answers 410', async () => {
    const { run, actionId } = await approvalRun({ timeout_ms: 5000 });
    const link = pathOf(await linkOf(manager, actionId));
    await finished(run);
    expect((await app.anonymous.get(link)).status).toBe(410);
    expect((await app.anonymous.post(link, undefined, { form: { decision: 'approve' } })).status).toBe(410);
  });

  it('a form without a decision is shown again with the problem', async () => {
    const { actionId } = await approvalRun();
    const link = pathOf(await linkOf(manager, actionId));
    const answer = await app.anonymous.post(link, undefined, { form: { note: 'hmm' } });
    expect(answer.status).toBe(422);
    expect(answer.text).toContain('choose Approve or Reject');
    expect(await stored(actionId)).toEqual({ status: 'pending', votes: 0 });
  });
});
