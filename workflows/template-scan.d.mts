/** One `{{ }}` of a template string: `start` of the `{{`, `end` just past the `}}` (-1: never closed), the expression between. */
export interface TemplatePart {
  start: number;
  end: number;
  source: string;
}

export function templateParts(text: string): TemplatePart[];

export function wholeExpression(text: string): string | undefined;

export function maskLiterals(source: string): string;
