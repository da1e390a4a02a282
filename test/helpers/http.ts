import type { OpenApiChecker } from './openapi-check.js';

export type Credentials = { login: string; password: string } | { cookie: string; nonce?: string };

export interface HttpResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  body?: unknown;
  form?: Record<string, string>;
  raw?: string | Buffer;
  contentType?: string;
  headers?: Record<string, string>;
  /** Skip the OpenAPI check (for deliberately undocumented cases such as 405). */
  unchecked?: boolean;
}

/** A fetch wrapper whose every response is checked against the OpenAPI document. */
export class HttpClient {
  constructor(
    readonly baseUrl: string,
    private readonly checker: OpenApiChecker,
    private readonly credentials?: Credentials,
  ) {}

  async request<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<HttpResponse<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (this.credentials && 'login' in this.credentials) {
      headers.authorization = 'Basic ' + Buffer.from(`${this.credentials.login}:${this.credentials.password}`).toString('base64');
    } else if (this.credentials) {
      headers.cookie = this.credentials.cookie;
      if (this.credentials.nonce) headers['x-svc-nonce'] = this.credentials.nonce;
    }
    let body: string | Buffer | undefined;
    if (options.raw !== undefined) {
      body = options.raw;
      if (options.contentType) headers['content-type'] = options.contentType;
    } else if (options.form) {
      body = new URLSearchParams(options.form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] = 'application/json';
    }
    const response = await fetch(this.baseUrl + path, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await response.text();
    const contentType = response.headers.get('content-type') ?? '';
    let parsed: unknown = text;
    if (contentType.includes('json')) parsed = text ? JSON.parse(text) : undefined;
    if (!options.unchecked) {
      const problems = this.checker.check(method, path, response.status, contentType, parsed, response.headers);
      if (problems.length) throw new Error(`Response does not match the OpenAPI document:\n${problems.join('\n')}\nbody: ${text.slice(0, 2000)}`);
    }
    return { status: response.status, headers: response.headers, body: parsed as T, text };
  }

  get<T = any>(path: string, options?: RequestOptions) {
    return this.request<T>('GET', path, options);
  }
  post<T = any>(path: string, body?: unknown, options?: RequestOptions) {
    return this.request<T>('POST', path, { ...options, ...(body !== undefined ? { body } : {}) });
  }
  patch<T = any>(path: string, body?: unknown, options?: RequestOptions) {
    return this.request<T>('PATCH', path, { ...options, ...(body !== undefined ? { body } : {}) });
  }
  delete<T = any>(path: string, options?: RequestOptions) {
    return this.request<T>('DELETE', path, options);
  }
}
