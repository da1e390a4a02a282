import { z } from 'zod';
import type { Context } from 'koa';
import { defineRoute, type AnyRoute, type ResponseSpec } from '../http/route.js';
import type { HttpErrorCode } from '../platform/errors.js';
import { APPROVAL_PAGE_PATH } from './approval.service.js';
import { PAGE_HEADERS } from './approval.page.js';
import type { ApprovalPages, PageAnswer } from './approval-pages.js';

const headers = {
  'Content-Security-Policy': { description: "No script, no resource but the page's own style, posts only to itself, never framed", required: true },
  'Referrer-Policy': { description: '`no-referrer`: the link (a credential) never leaves in a Referer header', required: true },
  'X-Frame-Options': { description: '`DENY`', required: true },
};
const html = (description: string, errorCodes?: HttpErrorCode[]): ResponseSpec => ({
  description,
  contentType: 'text/html',
  headers,
  ...(errorCodes ? { errorCodes } : {}),
});
const params = z.object({ token: z.string().max(400).describe("The approver's signed token, as the link carries it") });
const shown = {
  200: html('The page: summary, details, the fields (the editable ones as inputs), a note, Approve and Reject'),
  403: html('The person the link is for may not decide: no longer an approver, or one of the people the run acts for while self-approval is off', [
    'forbidden',
  ]),
  404: html('The link is not valid: incomplete or altered, or for a person or action that no longer exists', ['not_found']),
  409: html('The approver decided already, or the approval ended (approved, rejected or cancelled)', ['approver_already_decided', 'action_already_decided']),
  410: html('The link expired with its approval', ['action_expired']),
};

function send(ctx: Context, answer: PageAnswer) {
  ctx.type = 'text/html; charset=utf-8';
  return { status: answer.status, raw: answer.html, headers: { ...PAGE_HEADERS } };
}

/** A form field sent more than once counts once (its first value). */
const firstValues = (body: Record<string, unknown>) =>
  Object.fromEntries(
    Object.entries(body).flatMap(([k, v]) => {
      const value = Array.isArray(v) ? v[0] : v;
      return typeof value === 'string' ? [[k, value]] : [];
    }),
  ) as Record<string, string>;

/** The approver's page: GET (and HEAD) show it, the form's POST decides. */
export function approvalPageRoutes({ approvalPages }: { approvalPages: ApprovalPages }): AnyRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: `${APPROVAL_PAGE_PATH}/{token}`,
      operationId: 'showApprovalPage',
      summary: "An approver's page of a workflow approval (HTML); showing it decides nothing",
      description:
        "The link an approver is sent (and finds as `approve_url` in GET /api/agent/v1/actions/{action_id}): it needs no login, the signed token in it is that approver's credential for that one action, valid until the action's deadline and dead once they decided. GET and HEAD only show the page, so a mail scanner or link preview that opens it decides nothing; the form posts back to the same address. Every answer is HTML with `Referrer-Policy: no-referrer`, a strict Content-Security-Policy and `X-Frame-Options: DENY`.",
      tag: 'waits',
      access: 'public',
      params,
      responses: shown,
      handler: async ({ params: p, ctx }) => send(ctx, await approvalPages.show(p.token)),
    }),
    defineRoute({
      method: 'post',
      path: `${APPROVAL_PAGE_PATH}/{token}`,
      operationId: 'decideOnApprovalPage',
      summary: "The approver's page's form: approves or rejects, as that approver",
      description:
        "A form post (`decision`: `approve` or `reject`, `note`, and `field_<n>` for the n-th editable field, counted from 0 in the order of the `editable` schema's `properties`) from the page. The decision is the approver's own, under the same rules as POST /api/agent/v1/actions/{action_id}/approve or /reject: once per approver (a second post answers 409), not after the deadline (410), not by the people the run acts for unless self-approval is on (403). Edited fields the approval's `editable` schema refuses show the form again with each problem named (422); nothing is decided then.",
      tag: 'waits',
      access: 'public',
      params,
      bodyTypes: ['form'],
      bodyOptional: true,
      body: z.record(z.string(), z.unknown()),
      responses: {
        ...shown,
        200: html('The decision was recorded'),
        422: html('The form has problems (each named on the page); nothing was decided', ['validation_failed']),
      },
      handler: async ({ params: p, body, ctx }) => send(ctx, await approvalPages.decide(p.token, firstValues(body))),
    }),
  ];
}
