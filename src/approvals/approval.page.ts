import { createHash } from 'node:crypto';
import type { FieldProblem } from '../platform/errors.js';
import { editableKeys, fieldInput, inputKindOf, type EditableSchema } from './editable-fields.js';

// The approver's page as HTML: no script, one inline style block (allowed by its hash in the page's
// Content-Security-Policy), a form that posts back to the same address. Pure, so it is unit tested
// on its own (approval.page.test.ts); the route sends it with its headers.

const STYLE = `body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}table{border-collapse:collapse;width:100%;margin:1rem 0}th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #ddd;vertical-align:top}
th{width:30%;font-weight:600}input,select,textarea{font:inherit;width:100%;box-sizing:border-box;padding:.3rem}input[type=checkbox]{width:auto}
textarea{min-height:4rem}pre{white-space:pre-wrap;background:#f5f5f5;padding:.75rem;border-radius:4px}.meta{color:#555;font-size:.9rem}
.errors{background:#fde8e8;border:1px solid #e0a0a0;padding:.5rem 1rem;border-radius:4px}.actions{display:flex;gap:1rem;margin-top:1rem}
button{font:inherit;padding:.5rem 1.5rem;border-radius:4px;border:1px solid #888;cursor:pointer}button.approve{background:#1f7a3a;color:#fff;border-color:#1f7a3a}
button.reject{background:#fff;color:#a11}`;

/** The hash of the page's one style block, for `style-src` in its Content-Security-Policy. */
export const STYLE_HASH = `sha256-${createHash('sha256').update(STYLE).digest('base64')}`;

/** The page's Content-Security-Policy: nothing may load or run but its own style; it posts only to itself and is never framed. */
export const PAGE_CSP = `default-src 'none'; style-src '${STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`;

const escape = (value: string) => value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const shown = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value, null, 2));

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><meta name="robots" content="noindex, nofollow"><title>${escape(title)}</title>
<style>${STYLE}</style></head>
<body>${body}</body></html>`;
}

export interface ApprovalPageModel {
  summary: string;
  details: unknown;
  fields: Record<string, unknown>;
  editable: EditableSchema | null;
  /** Who the link is for. */
  login: string;
  requestedBy: string | null;
  expiresAt: string;
  required: number;
  approvals: number;
  /** Problems of a submitted form (the action stays pending), and what was submitted. */
  problems?: FieldProblem[];
  submitted?: Record<string, string>;
}

const inputId = (key: string) => `f-${key.replace(/[^A-Za-z0-9_-]/g, '_')}`;

function control(key: string, index: number, property: Record<string, unknown>, value: unknown): string {
  const name = fieldInput(index);
  const id = inputId(key);
  const text = value === undefined || value === null ? '' : shown(value);
  switch (inputKindOf(property)) {
    case 'checkbox':
      return `<input type="checkbox" id="${escape(id)}" name="${escape(name)}" value="true"${value === true || value === 'true' ? ' checked' : ''}>`;
    case 'select': {
      const options = (property.enum as unknown[]).map((v) => `<option${String(v) === text ? ' selected' : ''}>${escape(String(v))}</option>`).join('');
      return `<select id="${escape(id)}" name="${escape(name)}">${options}</select>`;
    }
    case 'integer':
    case 'number':
      return `<input type="number" id="${escape(id)}" name="${escape(name)}" value="${escape(text)}"${inputKindOf(property) === 'number' ? ' step="any"' : ''}>`;
    case 'text':
      return `<input type="text" id="${escape(id)}" name="${escape(name)}" value="${escape(text)}">`;
    default:
      return `<textarea id="${escape(id)}" name="${escape(name)}">${escape(text)}</textarea>`;
  }
}

/** The form: the summary, details, every field (the editable ones as inputs), a note, Approve and Reject. */
export function renderApprovalPage(m: ApprovalPageModel): string {
  const keys = editableKeys(m.editable);
  const rows = [...new Set([...Object.keys(m.fields), ...keys])].map((key) => {
    if (!keys.includes(key)) return `<tr><th>${escape(key)}</th><td>${escape(shown(m.fields[key]))}</td></tr>`;
    const property = m.editable!.properties[key]!;
    const index = keys.indexOf(key);
    const value = m.submitted ? m.submitted[fieldInput(index)] : m.fields[key];
    const label = `<label for="${escape(inputId(key))}">${escape(String(property.title ?? key))}</label>`;
    return `<tr><th>${label}</th><td>${control(key, index, property, value)}</td></tr>`;
  });
  const problems = m.problems?.length
    ? `<div class="errors" role="alert"><p>Nothing was decided; please correct:</p><ul>${m.problems.map((p) => `<li>${escape(p.field)}: ${escape(p.message)}</li>`).join('')}</ul></div>`
    : '';
  const needs = m.required > 1 ? ` It needs ${m.required} approvals (${m.approvals} so far).` : '';
  return page(
    `Approval: ${m.summary}`,
    `<h1>${escape(m.summary)}</h1>
<p class="meta">For ${escape(m.login)}${m.requestedBy ? `, asked by a workflow of ${escape(m.requestedBy)}` : ''}. Decide before ${escape(m.expiresAt)}.${escape(needs)}</p>
${m.details === undefined || m.details === null ? '' : `<pre>${escape(shown(m.details))}</pre>`}
${problems}
<form method="post">
${rows.length ? `<table>${rows.join('\n')}</table>` : ''}
<p><label for="note">Note (optional)</label><textarea id="note" name="note" maxlength="4000">${escape(m.submitted?.note ?? '')}</textarea></p>
<div class="actions"><button class="approve" type="submit" name="decision" value="approve">Approve</button>
<button class="reject" type="submit" name="decision" value="reject">Reject</button></div>
</form>`,
  );
}

/** A page that only says something: the decision was recorded, or why the link cannot be used. */
export function renderMessagePage(title: string, message: string): string {
  return page(title, `<h1>${escape(title)}</h1><p>${escape(message)}</p>`);
}

/** The headers every answer of the page carries: nothing leaks through the referrer, nothing frames or scripts it, nothing caches it. */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': PAGE_CSP,
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Cache-Control': 'no-store',
};
