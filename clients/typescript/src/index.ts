// oncely for TypeScript: a Worker on the SQL worker protocol (docs/protocol.md) and enqueue().
export { Worker } from "./worker.js";
export type { Job, Handler, HandleOptions, StopOptions } from "./worker.js";
export { enqueue, openBatch, closeBatch } from "./enqueue.js";
export type { EnqueueOptions, Queryable, Id, JobDescription, BatchCallbacks } from "./enqueue.js";
export {
  PermanentError, RetryAfterError, LeaseLostError, ShutdownError, ConfigError, SqlState, decide,
} from "./errors.js";
export type { Outcome } from "./errors.js";
export { connectionsNeeded } from "./options.js";
export type { WorkerOptions, QueueOptions, Logger } from "./options.js";
