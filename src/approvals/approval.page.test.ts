import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { PAGE_CSP, PAGE_HEADERS, STYLE_HASH, renderApprovalPage, renderMessagePage } from './approval.page.js';

const model = {
  summary: 'Pay <script>alert(1)</script> "now"',
  details: { note: '</pre><img src=x onerror=alert(1)>' },
  fields: { amount: 1800, 'we<ird': 'x"y' },
  editable: { type: 'object' as const, properties: { amount: { type: 'number' }, 'we<ird': { type: 'string', maxLength: 20 } } },
  login: 'grace',
  requestedBy: 'ada',
  expiresAt: '2030-01-01T00:00:00.000Z',
  required: 2,
  approvals: 1,
};

describe("the approver's page", () => {
  it('escapes everything the run wrote, and holds no script', () => {
    const html = renderApprovalPage(model);
    expect(html).not.toMatch(/<script|<img/);
    expect(html).toContain('&lt;/pre&gt;&lt;img src=x onerror=alert(1)&gt;');
    expect(html).toContain('Pay &lt;script&gt;alert(1)&lt;/script&gt; &quot;now&quot;');
    expect(html).toContain('value="x&quot;y"');
    expect(html).toContain('It needs 2 approvals (1 so far).');
    expect(renderMessagePage('<b>', '<i>')).toContain('<h1>&lt;b&gt;</h1><p>&lt;i&gt;</p>');
  });

  it("allows its one style block by the block's hash, and nothing else", () => {
    const html = renderApprovalPage(model);
    const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1]!;
    expect(`sha256-${createHash('sha256').update(style).digest('base64')}`).toBe(STYLE_HASH);
    expect(PAGE_CSP).toBe(`default-src 'none'; style-src '${STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`);
    expect(PAGE_HEADERS).toMatchObject({ 'Referrer-Policy': 'no-referrer', 'X-Frame-Options': 'DENY', 'Cache-Control': 'no-store' });
  });

  it('shows a submitted form again with its problems and what was sent', () => {
    const html = renderApprovalPage({
      ...model,
      problems: [{ field: 'fields.amount', message: 'must be <= 2000' }],
      submitted: { field_0: '9000', note: 'n' },
    });
    expect(html).toContain('fields.amount: must be &lt;= 2000');
    expect(html).toContain('value="9000"');
    expect(html).toContain('>n</textarea>');
  });
});
