/**
 * How long the outbox's store calls hold Redis (issue 37): Redis runs one command at a time, so a pickup's grant
 * write that arrives while an outbox script runs waits for it. On a redis-server of its own, in rounds: the
 * pickups' spans enqueued as the pickup batches send them (pieces of 25), claimed by the deliverer (100 at a time)
 * and acknowledged, each call's time inside Redis read from Redis' slow log (threshold 0). The baseline, in the
 * same rounds: the same bodies written with a plain HSET and read back with a plain HMGET, which is what moving
 * those bytes costs Redis at least. The ratios are the result: absolute times follow the machine.
 *
 * Run (needs redis-server): npm run bench -- outbox-holds
 * Options: --rounds 300  --body-bytes 1200 (a queue-wait span's JSON is about that)  --claim 100
 */
import Redis from 'ioredis';
import { parseArgs } from 'node:util';
import { OutboxEntry } from '../src/outbox/outbox';
import { RedisOutboxStore } from '../src/outbox/redis-outbox-store';
import { OUTBOX_DUE_KEY, OUTBOX_SPANS_KEY } from '../src/store/redis-keys';
import { RedisStore } from '../src/store/redis-store';
import { startRedis } from '../test/helpers/redis';
import { runBench } from './lib/bench-env';
import { median, percentile } from './lib/percentiles';
import { printTable } from './lib/table';
import { scriptNames } from './lib/redis-holds';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '300' },
    'body-bytes': { type: 'string', default: '1200' },
    claim: { type: 'string', default: '100' },
  },
});
const ROUNDS = Number(args.rounds);
const CLAIM = Number(args.claim);
const BODY = `{"span":"${'x'.repeat(Math.max(0, Number(args['body-bytes']) - 12))}"}`;
const SCRATCH = 'bench:{outbox}:floor';

async function main(): Promise<void> {
  const redis = await startRedis();
  const client = new Redis(redis.url, { enableAutoPipelining: false });
  const store = new RedisStore(client);
  const outbox = new RedisOutboxStore(store);
  const names = scriptNames();
  try {
    const limits = { maxSpans: 1_000_000, rememberMs: 600_000 };
    await outbox.enqueue([{ key: 'warm', body: BODY, enqueuedAt: Date.now() }], limits); // scripts loaded before the log starts
    await outbox.acknowledge((await outbox.claim(1, 60_000)).map((entry) => entry.key));
    await client.config('SET', 'slowlog-log-slower-than', '0');
    await client.config('SET', 'slowlog-max-len', '1000000');
    await client.slowlog('RESET');
    let next = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const entries: OutboxEntry[] = Array.from({ length: CLAIM }, () => ({ key: `span${next++}`, body: BODY, enqueuedAt: Date.now() }));
      await outbox.enqueue(entries, limits);
      const claimed = await outbox.claim(CLAIM, 60_000);
      if (claimed.length !== CLAIM) throw new Error(`claimed ${claimed.length} of ${CLAIM}`);
      await outbox.acknowledge(claimed.map((entry) => entry.key));
      // The floor: the same bytes in and out of a hash, with plain commands.
      for (let start = 0; start < CLAIM; start += 25) {
        await client.hset(SCRATCH, ...entries.slice(start, start + 25).flatMap((entry) => [entry.key, Buffer.from(entry.body)]));
      }
      await client.hmgetBuffer(SCRATCH, ...entries.map((entry) => entry.key));
      await client.del(SCRATCH);
    }
    const log = (await client.slowlog('GET', 1_000_000)) as [number, number, number, string[], string][];
    // Calls from clients only: a script's own commands are logged too (Redis 7), inside its time, from client `?:0`.
    const times = new Map<string, number[]>();
    const add = (name: string, us: number) => {
      const list = times.get(name) ?? [];
      list.push(us);
      times.set(name, list);
    };
    for (const [, , us, [command, ...rest], from] of log.reverse()) {
      if (from === '?:0') continue;
      const name = command.toLowerCase();
      if (name === 'evalsha') add(names.get(rest[0]) ?? rest[0], us);
      // The enqueue's transaction: its bodies' HSET, then its script sent as text (EXEC itself is not logged).
      else if (name === 'eval' && rest[2] === OUTBOX_DUE_KEY) add('cjtEnqueueSpans', us);
      else if (name === 'hset' && rest[0] === OUTBOX_SPANS_KEY) add('enqueue HSET', us);
      else if (name === 'hset' && rest[0] === SCRATCH) add('floor HSET', us);
      else if (name === 'hmget' && rest[0] === SCRATCH) add('floor HMGET', us);
      // What a claim reads after its script, with plain commands (none while the script read it in Lua).
      else if (['hmget', 'zmscore'].includes(name) && rest[0].startsWith('cjt:{outbox}:')) add('claim reads', us);
    }
    const per = (name: string) => times.get(name) ?? [];
    // Per piece of 25 (enqueue) and per claim of CLAIM, against the plain commands. A claim is its script and the
    // reads after it (three per claim, one after another): its time in all, and the script alone, its longest hold.
    const reads = per('claim reads');
    const perClaim = reads.length / Math.max(1, per('cjtClaimSpans').length);
    const claimTotals = per('cjtClaimSpans').map((us, i) => us + reads.slice(i * perClaim, (i + 1) * perClaim).reduce((sum, n) => sum + n, 0));
    const rows = [['call', 'calls', 'median', 'p99', 'baseline', 'median / baseline']];
    const row = (label: string, samples: number[], baseline: number[], baseLabel: string) =>
      rows.push([
        label,
        String(samples.length),
        `${median(samples)} µs`,
        `${percentile(samples, 99)} µs`,
        baseLabel,
        (median(samples) / median(baseline)).toFixed(2),
      ]);
    // An enqueue is its script, with (since its bodies left Lua) the HSET before it in the same transaction.
    const enqueueTotals = per('cjtEnqueueSpans').map((us, i) => us + (per('enqueue HSET')[i] ?? 0));
    row('enqueue, 25 spans', enqueueTotals, per('floor HSET'), `HSET of the 25 bodies ${median(per('floor HSET'))} µs`);
    row(`claim, ${CLAIM} spans, in all`, claimTotals, per('floor HMGET'), `HMGET of the ${CLAIM} bodies ${median(per('floor HMGET'))} µs`);
    row(`claim, ${CLAIM} spans, its script alone`, per('cjtClaimSpans'), per('floor HMGET'), 'the same HMGET');
    row(`acknowledge, ${CLAIM} spans`, per('cjtAcknowledgeSpans'), per('floor HMGET'), 'the same HMGET');
    console.log(`Outbox calls inside Redis (its slow log, threshold 0), ${ROUNDS} rounds of ${CLAIM} spans of ${BODY.length} bytes; ratios are the result`);
    printTable(rows);
  } finally {
    client.disconnect();
    await redis.stop();
  }
}

runBench(main);
