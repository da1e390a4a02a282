/**
 * Where people reach the API, for the links the service hands out (an approver's page): the
 * configured SVC_PUBLIC_URL, else the request's own origin (in an API answer), else the address
 * this process's API listens on, else localhost on the configured port (a worker on its own).
 */
export class PublicUrl {
  private listening: string | undefined;

  constructor(
    private readonly configured: string | undefined,
    private readonly port: number,
  ) {}

  /** The API of this process listens at `url` (set once it does). */
  listeningAt(url: string): void {
    this.listening = url;
  }

  /** The base URL, without a trailing slash; `origin` is the request's, when there is one. */
  base(origin?: string): string {
    return (this.configured ?? origin ?? this.listening ?? `http://localhost:${this.port}`).replace(/\/+$/, '');
  }
}
