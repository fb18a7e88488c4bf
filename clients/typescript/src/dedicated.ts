// A DedicatedClient: one connection of the pool kept for one kind of statement, the worker's
// leases or its completions. A server session keeps what it learned running a statement (the
// plans of the PL/pgSQL functions it called, the catalog entries it read): lease_jobs() takes
// about twice as long on a session that never ran it. Through the pool, the leases and the
// completions took turns on whichever connection was free, and a burn-down paid that first
// time on each (measured: 10 to 15 % of a 20,000-job burn-down, bench/clients.sh).
//
// Its statements run one at a time (the lease loop awaits each lease; the Completer has one
// call in flight). A connection that failed is given back broken, so that the pool closes it,
// and the next statement takes another.

import type { Pool, PoolClient, QueryResult, QueryResultRow } from "pg";

export class DedicatedClient {
  private client: PoolClient | undefined;
  private broken: Error | undefined;
  private readonly onError = (e: Error) => (this.broken ??= e); // a checked-out client's error has no other listener

  constructor(private readonly pool: Pool) {}

  async query<R extends QueryResultRow>(text: string, values: unknown[]): Promise<QueryResult<R>> {
    if (this.client === undefined) {
      const client = await this.pool.connect();
      client.on("error", this.onError);
      this.client = client;
    }
    try {
      return await this.client.query<R>(text, values);
    } catch (e) {
      // Closed on any failure: a statement's own error (a bad argument, a queue that is not a
      // lease queue) would leave the session usable and a lost connection would not, but
      // telling them apart is not worth it for what is rare.
      this.close(e instanceof Error ? e : new Error(String(e)));
      throw e;
    }
  }

  /** Gives the connection back to the pool (broken: closed), if it holds one. */
  close(broken?: Error): void {
    const client = this.client;
    if (client === undefined) return;
    this.client = undefined;
    client.off("error", this.onError);
    client.release(broken ?? this.broken);
    this.broken = undefined;
  }
}
