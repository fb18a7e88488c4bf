// The Completer: completes the jobs of job-only handlers in batches, with one complete_jobs()
// call (one statement, one commit) for every job that finished while the previous call was on
// its way. Group commit without a timer: an idle worker's job is completed at once, a busy
// worker's jobs share commits, and at most one call is in flight.
//
// A retry is safe (complete_jobs() is fenced by the tokens: a pair completed already is just
// not returned again), so a failed call is retried with backoff for as long as keepTrying()
// says; after that its jobs are given up, and their leases expire: they run again, never lost.
//
// The jobs of one call share one promise, which settles with the ids the call completed: a
// no-op burn-down finishes tens of thousands of jobs a second, and a promise, a closure and a
// record for each of them were a good part of the worker's garbage.

/** Completes the pairs it is given, with their outputs (JSON text, null: none); returns the ids
 *  it completed (those still leased by their token). */
export type CompleteJobs = (ids: string[], tokens: string[], outputs: (string | null)[]) => Promise<string[]>;

/** The ids a call completed, or undefined when the call was given up (the database failed). */
export type Completed = ReadonlySet<string> | undefined;

/** The jobs of one call, and the promise they share. */
class Batch {
  readonly ids: string[] = [];
  readonly tokens: string[] = [];
  readonly outputs: (string | null)[] = [];
  /** Its call was made: later jobs go in the next batch. */
  sealed = false;
  resolve!: (completed: Completed) => void;
  readonly done = new Promise<Completed>((resolve) => (this.resolve = resolve));

  /** Takes the jobs of `next` (its promise then settles with this one's). */
  absorb(next: Batch): void {
    this.ids.push(...next.ids);
    this.tokens.push(...next.tokens);
    this.outputs.push(...next.outputs);
    void this.done.then(next.resolve);
  }
}

export const MAX_JOBS_PER_CALL = 1000;

export class Completer {
  private readonly batches: Batch[] = []; // oldest first; only the last one, unsealed, takes more
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

  /** Settles once the job's completion committed or was given up: with the ids its call
   *  completed (the job's among them unless its lease was no longer the caller's), or with
   *  undefined when the call was given up. */
  complete(id: string, token: string, output: string | null = null): Promise<Completed> {
    let batch = this.batches[this.batches.length - 1];
    if (batch === undefined || batch.sealed || batch.ids.length >= MAX_JOBS_PER_CALL) {
      this.batches.push((batch = new Batch()));
    }
    batch.ids.push(id);
    batch.tokens.push(token);
    batch.outputs.push(output);
    this.flushing ??= this.flush().finally(() => (this.flushing = undefined));
    return batch.done;
  }

  /** Settles when nothing waits and no call is in flight. */
  async idle(): Promise<void> {
    while (this.flushing !== undefined) await this.flushing;
  }

  private async flush(): Promise<void> {
    let failures = 0;
    for (let batch = this.batches[0]; batch !== undefined; batch = this.batches[0]) {
      batch.sealed = true;
      try {
        const completed = new Set(await this.completeJobs(batch.ids, batch.tokens, batch.outputs));
        this.batches.shift();
        failures = 0;
        batch.resolve(completed);
      } catch (e) {
        failures += 1;
        const retrying = this.keepTrying();
        this.onError(e, batch.ids.length, retrying);
        if (!retrying) {
          this.batches.shift();
          batch.resolve(undefined);
          continue;
        }
        await new Promise((resolve) => setTimeout(resolve, this.retryDelayMs(failures)));
        // The retry takes the jobs that finished meanwhile too, as far as one call carries.
        const next = this.batches[1];
        if (next !== undefined && batch.ids.length + next.ids.length <= MAX_JOBS_PER_CALL) {
          batch.absorb(next);
          this.batches.splice(1, 1);
        }
      }
    }
  }
}
