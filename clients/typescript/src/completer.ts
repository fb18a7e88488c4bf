// The Completer: completes the jobs of job-only handlers in batches, with one complete_jobs()
// call (one statement, one commit) for every job that finished while the previous call was on
// its way. Group commit without a timer: an idle worker's job is completed at once, a busy
// worker's jobs share commits, and at most one call is in flight.
//
// A retry is safe (complete_jobs() is fenced by the tokens: a pair completed already is just
// not returned again), so a failed call is retried with backoff for as long as keepTrying()
// says; after that its jobs are given up, and their leases expire: they run again, never lost.

/** Completes the pairs it is given; returns the ids it completed (those still leased by their token). */
export type CompleteJobs = (ids: string[], tokens: string[]) => Promise<string[]>;

interface Pending {
  readonly id: string;
  readonly token: string;
  readonly resolve: (completed: boolean | undefined) => void;
}

export const MAX_JOBS_PER_CALL = 1000;

export class Completer {
  private waiting: Pending[] = [];
  private flushing: Promise<void> | undefined;

  /**
   * @param completeJobs the statement
   * @param keepTrying after a failed call: whether to try again (false: give the batch up)
   * @param onError told about each failed call, and whether it will be retried
   * @param retryDelayMs the wait before the n-th retry (from 1)
   */
  constructor(
    private readonly completeJobs: CompleteJobs,
    private readonly keepTrying: () => boolean,
    private readonly onError: (error: unknown, jobs: number, retrying: boolean) => void,
    private readonly retryDelayMs: (attempt: number) => number = (n) => Math.min(100 * 2 ** n, 5000),
  ) {}

  /** Resolves true once the job's completion committed, false when its lease was no longer
   *  the caller's, undefined when the completion was given up (the database failed). */
  complete(id: string, token: string): Promise<boolean | undefined> {
    return new Promise((resolve) => {
      this.waiting.push({ id, token, resolve });
      this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
    });
  }

  /** Settles when nothing waits and no call is in flight. */
  async idle(): Promise<void> {
    while (this.flushing !== undefined) await this.flushing;
  }

  private async flush(): Promise<void> {
    let failures = 0;
    while (this.waiting.length > 0) {
      const batch = this.waiting.slice(0, MAX_JOBS_PER_CALL);
      try {
        const completed = new Set(await this.completeJobs(batch.map((p) => p.id), batch.map((p) => p.token)));
        this.waiting.splice(0, batch.length);
        failures = 0;
        for (const p of batch) p.resolve(completed.has(p.id));
      } catch (e) {
        failures += 1;
        const retrying = this.keepTrying();
        this.onError(e, batch.length, retrying);
        if (!retrying) {
          this.waiting.splice(0, batch.length);
          for (const p of batch) p.resolve(undefined);
          continue;
        }
        await new Promise((resolve) => setTimeout(resolve, this.retryDelayMs(failures)));
      }
    }
  }
}
