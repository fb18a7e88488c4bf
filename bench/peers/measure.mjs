// The measurement method shared by graphile.mjs and pgboss.mjs (bench/run.sh runs them):
// the same four scenarios for every peer, each from a freshly created database.
//
//   burn            pre-insert --jobs no-op jobs with the peer's bulk API (chunks of --chunk),
//                   ANALYZE, CHECKPOINT; start the configuration's worker processes; time from
//                   the first handler start until the database shows no job left to run.
//                   --handler-ms N: each handler waits N ms (an I/O-bound job; burn only, for
//                   peers whose handler is awaited per job: graphile-worker).
//                   --hold-snapshot: a REPEATABLE READ reader of the jobs table keeps its
//                   snapshot open for the whole burn-down (a report, pg_dump): vacuum can
//                   remove none of the jobs done meanwhile, nor their index entries.
//   latency         one idle worker; enqueue one job, time until its handler starts; a random
//                   pause of 0..--think-ms between samples; 20 warm-up samples first.
//   enqueue-single  one producer, one enqueue call per job, awaited in turn (200 warm-up calls).
//   enqueue-bulk    one producer, the bulk API with --chunk jobs per call.
//
// Prints one JSON object on stdout (jobs_per_s, or p50_ms and p99_ms, and what was run).
// Worker processes are this same script started again with --role worker; they report over
// Node's IPC channel, with process.hrtime (CLOCK_MONOTONIC, one clock for all processes).
import { fork } from 'node:child_process';
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';

const now = () => process.hrtime.bigint();
const msBetween = (a, b) => Number(b - a) / 1e6;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const options = {
  role: { type: 'string', default: 'driver' },
  config: { type: 'string' },
  jobs: { type: 'string', default: '20000' },
  chunk: { type: 'string', default: '1000' },
  samples: { type: 'string', default: '200' },
  'think-ms': { type: 'string', default: '10' },
  'cap-s': { type: 'string', default: '120' },
  'handler-ms': { type: 'string', default: '0' },
  'hold-snapshot': { type: 'boolean', default: false },
  database: { type: 'string' },  // the database this run created (workers are told)
  mode: { type: 'string' },      // a worker's: burn or latency
};

function databaseUrl(serverUrl, name) {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function withClient(url, fn) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try { return await fn(client); } finally { await client.end(); }
}

// Nearest rank: the smallest sample with at least p% of the samples at or below it.
function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

// The version npm installed beside these scripts (the packages do not export package.json).
export function installedVersion(name) {
  return JSON.parse(fs.readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
}

// ---- the worker process -------------------------------------------------------------------

async function workerRole(peer, args) {
  const url = databaseUrl(process.env.BENCH_SERVER_URL, args.database);
  const config = peer.configs[args.config];
  let handled = 0;
  let reported = 0;
  let cpuAtFirst = null;  // the process's CPU time when its first job started
  const handlerMs = Number(args['handler-ms']);
  const onStart = args.mode === 'latency'
    ? (payload) => { handled++; process.send({ type: 'start', id: payload.id, t: String(now()) }); }
    : () => {
      if (handled++ === 0) {
        cpuAtFirst = process.cpuUsage();
        process.send({ type: 'first', t: String(now()) });
      }
      return handlerMs > 0 ? sleep(handlerMs) : undefined;
    };
  const ticker = setInterval(() => {
    if (handled !== reported) { reported = handled; process.send({ type: 'handled', n: handled }); }
  }, 10);
  const worker = await peer.startWorker(url, config, onStart);
  process.send({ type: 'ready' });
  process.on('message', async (message) => {
    if (message.type !== 'stop') return;
    clearInterval(ticker);
    // CPU from the first job to the stop, the stop included (a few ms at most).
    const cpu = process.cpuUsage(cpuAtFirst ?? undefined);
    await worker.stop();
    process.send({ type: 'stopped', n: handled, cpu_us: cpu.user + cpu.system }, () => process.exit(0));
  });
  process.on('disconnect', () => process.exit(1));
}

function startWorker(script, args, mode, database) {
  const child = fork(script, ['--role', 'worker', '--mode', mode, '--config', args.config, '--database', database,
    '--handler-ms', args['handler-ms']],
    { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const worker = { child, first: null, handled: 0, exited: false, cpuUs: 0, onMessage: () => {} };
  worker.ready = new Promise((resolve, reject) => {
    child.on('message', (message) => {
      if (message.type === 'ready') resolve();
      else if (message.type === 'first') worker.first = BigInt(message.t);
      else if (message.type === 'handled') worker.handled = message.n;
      else if (message.type === 'stopped') worker.cpuUs = message.cpu_us;
      worker.onMessage(message);
    });
    child.on('exit', (code) => { worker.exited = true; reject(new Error(`a worker exited with ${code}`)); });
  });
  worker.ready.catch(() => {});
  worker.stop = () => new Promise((resolve) => {
    if (worker.exited) return resolve();
    const kill = setTimeout(() => child.kill('SIGKILL'), 15000);
    child.on('exit', () => { clearTimeout(kill); resolve(); });
    child.send({ type: 'stop' });
  });
  return worker;
}

// ---- the scenarios ------------------------------------------------------------------------

async function enqueueChunks(producer, from, to, chunk) {
  for (let i = from; i < to; i += chunk) {
    const payloads = [];
    for (let id = i; id < Math.min(to, i + chunk); id++) payloads.push({ id });
    await producer.enqueueMany(payloads);
  }
}

async function burn(ctx) {
  const { peer, args, url, config } = ctx;
  const jobs = Number(args.jobs);
  const producer = await peer.producer(url);
  await enqueueChunks(producer, 0, jobs, Number(args.chunk));
  await producer.close();
  await withClient(url, async (c) => {
    await c.query(peer.analyzeSql);
    // So that the preload's dirty pages are not written during the measurement; needs a
    // superuser (or pg_checkpoint), which the benchmark's own cluster has.
    await c.query('CHECKPOINT').catch((e) => console.error(`[bench] CHECKPOINT skipped: ${e.message}`));
  });
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  const pending = async () => Number((await db.query(peer.pendingSql)).rows[0].n);
  const before = await pending();
  if (before !== jobs) throw new Error(`${before} jobs pending after the preload, expected ${jobs}`);
  let reader = null;
  if (args['hold-snapshot']) {
    reader = new pg.Client({ connectionString: url });
    await reader.connect();
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await reader.query(peer.pendingSql);  // the snapshot is taken here, and held
  }

  // The most connections the workers held: the run's database's backends, this one excluded,
  // sampled every 50 ms.
  let mostConnections = 0;
  let sampling = Promise.resolve();
  const sampler = setInterval(() => {
    sampling = sampling.then(async () => {
      const { rows } = await db.query(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
      mostConnections = Math.max(mostConnections, rows[0].n);
    }).catch(() => {});
  }, 50);

  const spawned = now();
  const workers = [];
  for (let i = 0; i < config.processes; i++) workers.push(startWorker(ctx.script, args, 'burn', ctx.database));
  const first = () => workers.map((w) => w.first).filter((t) => t !== null).reduce((a, b) => (b < a ? b : a));
  const capMs = Number(args['cap-s']) * 1000;
  const check = () => {
    if (workers.some((w) => w.exited)) throw new Error('a worker exited during the run');
    if (msBetween(spawned, now()) > capMs) throw new Error(`not done within ${args['cap-s']} s`);
  };
  // The workers' counts are cheap to read; the database is asked only near the end.
  while (workers.reduce((sum, w) => sum + w.handled, 0) < 0.9 * jobs) { check(); await sleep(2); }
  let end;
  for (;;) {
    const left = await pending();
    end = now();
    if (left === 0) break;
    check();
    await sleep(5);
  }
  const start = first();
  clearInterval(sampler);
  await sampling;
  await Promise.all(workers.map((w) => w.stop()));
  await db.end();
  if (reader) { await reader.query('COMMIT'); await reader.end(); }
  const ms = msBetween(start, end);
  const cpuUs = workers.reduce((sum, w) => sum + w.cpuUs, 0);  // the workers' processes only, not the server's
  return { jobs, jobs_per_s: jobs / (ms / 1000), ms, startup_ms: msBetween(spawned, start), processes: config.processes,
    worker_cpu_us_per_job: Math.round(cpuUs / jobs), most_connections: mostConnections, hold_snapshot: args['hold-snapshot'] };
}

async function latency(ctx) {
  const { peer, args, url } = ctx;
  const samples = Number(args.samples);
  const thinkMs = Number(args['think-ms']);
  const producer = await peer.producer(url);
  const worker = startWorker(ctx.script, args, 'latency', ctx.database);
  await worker.ready;
  const waiting = new Map();
  worker.onMessage = (message) => {
    if (message.type === 'start' && waiting.has(message.id)) { waiting.get(message.id)(BigInt(message.t)); waiting.delete(message.id); }
  };
  const one = async (id) => {
    const started = new Promise((resolve, reject) => {
      waiting.set(id, resolve);
      setTimeout(() => reject(new Error(`job ${id} did not start within 20 s`)), 20000).unref();
    });
    const sent = now();
    await producer.enqueue({ id });
    return msBetween(sent, await started);
  };
  for (let i = 1; i <= 20; i++) { await one(-i); await sleep(Math.random() * thinkMs); }
  await sleep(500);
  const values = [];
  for (let i = 0; i < samples; i++) { values.push(await one(i)); await sleep(Math.random() * thinkMs); }
  await worker.stop();
  await producer.close();
  values.sort((a, b) => a - b);
  return { samples, think_ms: thinkMs, p50_ms: percentile(values, 50), p99_ms: percentile(values, 99), max_ms: values[values.length - 1] };
}

async function enqueueSingle(ctx) {
  const jobs = Number(ctx.args.jobs);
  const producer = await ctx.peer.producer(ctx.url);
  for (let i = 1; i <= 200; i++) await producer.enqueue({ id: -i });  // connections, plans
  const start = now();
  for (let id = 0; id < jobs; id++) await producer.enqueue({ id });
  const ms = msBetween(start, now());
  await producer.close();
  return { jobs, jobs_per_s: jobs / (ms / 1000), ms };
}

async function enqueueBulk(ctx) {
  const jobs = Number(ctx.args.jobs);
  const chunk = Number(ctx.args.chunk);
  const producer = await ctx.peer.producer(ctx.url);
  await producer.enqueueMany([{ id: -1 }]);
  const start = now();
  await enqueueChunks(producer, 0, jobs, chunk);
  const ms = msBetween(start, now());
  await producer.close();
  return { jobs, chunk, jobs_per_s: jobs / (ms / 1000), ms };
}

const scenarios = { burn, latency, 'enqueue-single': enqueueSingle, 'enqueue-bulk': enqueueBulk };

// ---- entry --------------------------------------------------------------------------------

export async function main(peer, script) {
  const { values: args, positionals } = parseArgs({ options, allowPositionals: true });
  if (!process.env.BENCH_SERVER_URL) throw new Error('BENCH_SERVER_URL (a database URL on the server to use) is not set');
  if (args.role === 'worker') return workerRole(peer, args);

  const name = positionals[0];
  const scenario = scenarios[name];
  if (!scenario) throw new Error(`usage: ${peer.name} burn|latency|enqueue-single|enqueue-bulk [--config NAME] ...`);
  if (Number(args['handler-ms']) > 0 && (name !== 'burn' || !peer.awaitsHandler)) {
    throw new Error(`--handler-ms is for burn with a peer that awaits each handler (graphile-worker), not ${peer.name} ${name}`);
  }
  const needsConfig = name === 'burn' || name === 'latency';
  const config = needsConfig ? peer.configs[args.config] : null;
  if (needsConfig && !config) {
    throw new Error(`${name} needs --config, one of: ${Object.keys(peer.configs).join(', ')}`);
  }
  // A database of its own per run, named after this process so that runs on one server do
  // not meet; dropped again at the end.
  const database = `oncely_peer_${process.pid}`;
  const server = process.env.BENCH_SERVER_URL;
  const recreate = async (drop) => withClient(server, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    if (!drop) await c.query(`CREATE DATABASE ${database}`);
  });
  await recreate(false);
  const url = databaseUrl(server, database);
  try {
    await peer.install(url, config);
    const result = await scenario({ peer, args, url, config, database, script });
    console.log(JSON.stringify({ peer: peer.name, version: peer.version, node: process.version, scenario: name,
      config: args.config ?? null, ...result }));
  } finally {
    await recreate(true);
  }
  process.exit(0);
}
