import { AppError } from '../platform/errors.js';
import type { Principal } from '../auth/auth.service.js';
import type { AgentActionStore, WorkflowActionRow } from '../agent/agent-action.store.js';
import { toIso } from '../db/sql.js';
import { readApprovalToken, type Signer } from './approval-tokens.js';
import { renderApprovalPage, renderMessagePage } from './approval.page.js';
import { editsFromForm, type EditableSchema } from './editable-fields.js';
import { approvalRights, refusalOf, type ApprovalService } from './approval.service.js';

/** A page to answer: its status and HTML. */
export interface PageAnswer {
  status: 200 | 403 | 404 | 409 | 410 | 422;
  html: string;
}

const MAX_NOTE = 4000;

const message = (status: PageAnswer['status'], title: string, text: string): PageAnswer => ({ status, html: renderMessagePage(title, text) });
const invalidLink = () => message(404, 'This link is not valid', 'The link is incomplete or was altered. Open the link you were sent, or decide in the inbox.');
const DONE: Record<string, string> = {
  approved: 'approved',
  rejected: 'rejected',
  expired: 'expired undecided',
  cancelled: 'cancelled (its run was cancelled)',
};

/** Who the link is for and the action it decides, when both still allow a decision; else the page that says why. */
interface Opened {
  row: WorkflowActionRow;
  person: Principal;
  approvals: number;
}

/**
 * The approver's page: GET and HEAD only show (a mail scanner or a link preview decides nothing),
 * the form's POST decides. The signed token in the address is the approver's credential: it names
 * one person and one action, dies with the action's deadline, and is refused once that person
 * decided; every use checks again that they may decide (self-approval included).
 */
export class ApprovalPages {
  constructor(
    private readonly approvals: ApprovalService,
    private readonly actions: Pick<AgentActionStore, 'workflowAction'>,
    private readonly signer: Signer,
    private readonly clock: () => number = Date.now,
  ) {}

  /** Reads the token and the action; the answer to give instead when the link cannot decide. */
  private async open(token: string): Promise<Opened | PageAnswer> {
    const read = readApprovalToken(this.signer, token, Math.floor(this.clock() / 1000));
    if (read === 'invalid') return invalidLink();
    if (read === 'expired') return message(410, 'This link has expired', 'The approval it was for is past its deadline.');
    const row = await this.actions.workflowAction(read.actionId);
    const person = row && (await this.approvals.personOf(read.userId));
    if (!row || !person) return invalidLink();
    const votes = await this.approvals.votesOf(row.action_id);
    const mine = votes.find((v) => v.user_id === person.id);
    if (mine) return message(409, 'You already decided', `You ${mine.decision} this on ${toIso(mine.decided_at)}. Nothing more to do.`);
    if (row.status === 'expired' || (row.status === 'pending' && row.past))
      return message(410, 'This approval has expired', 'It was not decided before its deadline.');
    if (row.status !== 'pending') return message(409, 'This approval has ended', `It was ${DONE[row.status] ?? row.status}. Nothing more to do.`);
    const rights = approvalRights(person, row, false);
    if (!rights.mayDecide) return message(403, 'You cannot decide this approval', refusalOf(rights));
    return { row, person, approvals: votes.filter((v) => v.decision === 'approved').length };
  }

  /** The form (GET and HEAD), or why the link cannot decide. Changes nothing. */
  async show(token: string): Promise<PageAnswer> {
    const opened = await this.open(token);
    return 'html' in opened ? opened : { status: 200, html: this.form(opened) };
  }

  /** The form's POST: records the decision, or shows the form again with what is wrong (nothing decided). */
  async decide(token: string, form: Record<string, string>): Promise<PageAnswer> {
    const opened = await this.open(token);
    if ('html' in opened) return opened;
    const verb = form.decision;
    const note = form.note?.trim() ? form.note.trim() : undefined;
    const problems = [
      ...(verb === 'approve' || verb === 'reject' ? [] : [{ field: 'decision', message: 'choose Approve or Reject' }]),
      ...(note && note.length > MAX_NOTE ? [{ field: 'note', message: `must be at most ${MAX_NOTE} characters` }] : []),
    ];
    if (problems.length) return { status: 422, html: this.form(opened, problems, form) };
    const approved = verb === 'approve';
    try {
      await this.approvals.record(opened.person, opened.row, {
        approved,
        note,
        ...(approved && opened.row.editable ? { fields: editsFromForm(opened.row.editable as EditableSchema, form) } : {}),
      });
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      if (err.code === 'validation_failed')
        return { status: 422, html: this.form(opened, (err.data?.errors as { field: string; message: string }[]) ?? [], form) };
      if (err.code === 'action_expired') return message(410, 'This approval has expired', 'It was not decided before its deadline.');
      if (err.code === 'approver_already_decided') return message(409, 'You already decided', 'Your decision was recorded before. Nothing more to do.');
      if (err.code === 'action_already_decided') return message(409, 'This approval has ended', err.message);
      throw err;
    }
    return message(200, approved ? 'Approved' : 'Rejected', `Your decision on "${opened.row.summary}" was recorded. Thank you.`);
  }

  private form(opened: Opened, problems?: { field: string; message: string }[], submitted?: Record<string, string>): string {
    const { row } = opened;
    return renderApprovalPage({
      summary: row.summary,
      details: row.details,
      fields: row.fields,
      editable: row.editable as EditableSchema | null,
      login: opened.person.login,
      requestedBy: row.owner_login,
      expiresAt: toIso(row.expires_at)!,
      required: row.required,
      approvals: opened.approvals,
      ...(problems ? { problems } : {}),
      ...(submitted ? { submitted } : {}),
    });
  }
}
