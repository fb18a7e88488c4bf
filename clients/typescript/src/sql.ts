// Every statement the client runs, built once per schema. Only the protocol's documented
// functions are called (docs/protocol.md); the schema is the one identifier substituted,
// quoted; every value is a parameter. Ids and lease tokens are bigint: they travel as the
// decimal strings node-postgres returns for int8, never through a JS number.

/** A PostgreSQL identifier, double-quoted ("a""b" for a"b). */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** A PostgreSQL string literal ('it''s'). */
function literal(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}

export interface Statements {
  /** $1 queue, $2 max_jobs, $3 lease in ms or NULL (the policy's), $4 worker name. */
  readonly leaseJobs: string;
  /** $1 queue; after a short lease: in how many ms its limits may let one find room, or null (version 23). */
  readonly limitsRetryIn: string;
  /** $1 queue; whether it has limits across workers: queue_limits_held() has its row (version 23). */
  readonly hasLimits: string;
  /** $1 id, $2 lease token. */
  readonly completeJob: string;
  /** $1 ids, $2 lease tokens; returns the ids completed. */
  readonly completeJobs: string;
  /** complete_jobs() with the jobs' outputs (schema version 27). */
  readonly completeJobsWithOutputs: string;
  /** Whether the schema has complete_jobs() (version 20), which job-only handlers need. */
  readonly hasCompleteJobs: string;
  /** $1 id, $2 token, $3 error, $4 retryable, $5 retry_in ms or NULL, $6 detail (jsonb) or NULL. */
  readonly failJob: string;
  /** $1 tokens, $2 lease in ms or NULL; returns the lost tokens. */
  readonly renewLeases: string;
  /** $1 tokens. */
  readonly releaseJobs: string;
  /** LISTEN on the wake-up channel "<schema>.jobs". */
  readonly listen: string;
  /** The wake-up channel's name, as notifications carry it. */
  readonly channel: string;
  /** enqueue() with named arguments; see enqueue.ts. */
  readonly enqueue: string;
  /** The same with $11 depends_on and $12 batch_id (version 24). */
  readonly enqueueDependent: string;
  /** enqueue with $11 the producer's traceparent (version 26). */
  readonly enqueueTraced: string;
  /** enqueueDependent with $13 the traceparent. */
  readonly enqueueTracedDependent: string;
  /** $1..$3 on_success, on_failure, on_finish (jsonb or NULL); returns the batch id (version 24). */
  readonly openBatch: string;
  /** $1 batch id. */
  readonly closeBatch: string;
}

const ms = (p: string) => `CASE WHEN ${p}::bigint IS NULL THEN NULL ELSE ${p}::bigint * interval '1 millisecond' END`;

export function statements(schema: string): Statements {
  const s = quoteIdent(schema);
  const enqueueArgs =
    `kind => $1::text, payload => $2::jsonb, queue => coalesce($3::text, 'default'), idempotency_key => $4::text, ` +
    `run_at => coalesce($5::timestamptz, now() + ${ms("$6")}), priority => coalesce($7::int, 0), ` +
    `max_attempts => $8::int, unique_key => $9::text, on_conflict => coalesce($10::text, 'skip')`;
  return {
    leaseJobs:
      `SELECT id::text AS id, kind, payload, idempotency_key, attempt, lease_token::text AS lease_token, ` +
      // The expiry as milliseconds: a Date from a number, not a timestamp parsed per row.
      `(extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_expires_ms, trace_context ` +
      `FROM ${s}.lease_jobs($1::text, $2::int, ${ms("$3")}, $4::text)`,
    limitsRetryIn: `SELECT (extract(epoch FROM ${s}.limits_retry_in($1::text)) * 1000)::float8 AS ms`,
    hasLimits: `SELECT count(*) > 0 AS limited FROM ${s}.queue_limits_held($1::text)`,
    completeJob: `SELECT ${s}.complete_job($1::bigint, $2::bigint, $3::jsonb)`,
    completeJobs: `SELECT id::text AS id FROM ${s}.complete_jobs($1::bigint[], $2::bigint[]) AS id`,
    completeJobsWithOutputs: `SELECT id::text AS id FROM ${s}.complete_jobs($1::bigint[], $2::bigint[], $3::text[]) AS id`,
    hasCompleteJobs: `SELECT to_regprocedure(${literal(`${s}.complete_jobs(bigint[], bigint[])`)}) IS NOT NULL AS ok`,
    failJob: `SELECT ${s}.fail_job($1::bigint, $2::bigint, $3::text, $4::boolean, ${ms("$5")}, $6::jsonb) AS next`,
    renewLeases: `SELECT lost::text AS lost FROM ${s}.renew_leases($1::bigint[], ${ms("$2")}) AS lost`,
    releaseJobs: `SELECT ${s}.release_jobs($1::bigint[]) AS released`,
    listen: `LISTEN ${quoteIdent(`${schema}.jobs`)}`,
    channel: `${schema}.jobs`,
    enqueue: `SELECT ${s}.enqueue(${enqueueArgs})::text AS id`,
    enqueueDependent:
      `SELECT ${s}.enqueue(${enqueueArgs}, depends_on => $11::bigint[], batch_id => $12::bigint)::text AS id`,
    enqueueTraced: `SELECT ${s}.enqueue(${enqueueArgs}, traceparent => $11::text)::text AS id`,
    enqueueTracedDependent:
      `SELECT ${s}.enqueue(${enqueueArgs}, depends_on => $11::bigint[], batch_id => $12::bigint, ` +
      `traceparent => $13::text)::text AS id`,
    openBatch: `SELECT ${s}.open_batch($1::jsonb, $2::jsonb, $3::jsonb)::text AS id`,
    closeBatch: `SELECT ${s}.close_batch($1::bigint)`,
  };
}
