import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ReceivedHook, WebhookSpool } from './webhook-spool';

const LARGE = { maxHooks: 1000, maxBytes: 1024 * 1024 };
const directory = () => join(mkdtempSync(join(tmpdir(), 'cjt-spool-')), 'webhook-spool');

function hook(pipelineId: number, uuid: string, padding = ''): ReceivedHook {
  return { event: 'Job Hook', uuid, receivedAt: 1_700_000_000_000, pipelineId, body: { object_kind: 'build', pipeline_id: pipelineId, padding } };
}

async function uuidsIn(spool: WebhookSpool): Promise<string[]> {
  const uuids = [];
  for (const entry of spool.entries()) uuids.push((await spool.read(entry)).uuid!);
  return uuids;
}

describe('WebhookSpool', () => {
  it('gives back every hook as it was taken, in arrival order, and says which pipelines wait', async () => {
    const spool = await WebhookSpool.open(directory(), LARGE);
    for (const [pipeline, uuid] of [
      [1, 'a'],
      [2, 'b'],
      [1, 'c'],
    ] as const)
      expect(await spool.add(hook(pipeline, uuid))).toBe('spooled');
    expect(await uuidsIn(spool)).toEqual(['a', 'b', 'c']);
    expect(await spool.read(spool.entries()[1])).toEqual(hook(2, 'b'));
    expect(spool.holds(1)).toBe(true);
    expect(spool.holds(3)).toBe(false);

    await spool.remove(spool.entries()[1]);
    expect(spool.holds(2)).toBe(false);
    expect(await uuidsIn(spool)).toEqual(['a', 'c']);
  });

  it('keeps the order of concurrent arrivals, whichever write ends first', async () => {
    const spool = await WebhookSpool.open(directory(), LARGE);
    // A large hook takes longer to write than the small ones after it.
    await Promise.all([spool.add(hook(5, 'first', 'x'.repeat(200_000))), spool.add(hook(5, 'second')), spool.add(hook(5, 'third'))]);
    expect(await uuidsIn(spool)).toEqual(['first', 'second', 'third']);
  });

  it('refuses a hook past either bound, and takes one again once room is made', async () => {
    const byCount = await WebhookSpool.open(directory(), { maxHooks: 2, maxBytes: LARGE.maxBytes });
    expect([await byCount.add(hook(1, 'a')), await byCount.add(hook(1, 'b')), await byCount.add(hook(1, 'c'))]).toEqual(['spooled', 'spooled', 'full']);
    await byCount.remove(byCount.entries()[0]);
    expect(await byCount.add(hook(1, 'd'))).toBe('spooled');
    expect(await uuidsIn(byCount)).toEqual(['b', 'd']);

    const one = Buffer.byteLength(JSON.stringify(hook(1, 'a')));
    const byBytes = await WebhookSpool.open(directory(), { maxHooks: 100, maxBytes: 2 * one + 10 });
    expect([await byBytes.add(hook(1, 'a')), await byBytes.add(hook(1, 'b')), await byBytes.add(hook(1, 'c'))]).toEqual(['spooled', 'spooled', 'full']);
    expect(byBytes.depth()).toMatchObject({ hooks: 2, bytes: 2 * one });
    // A refused hook leaves nothing on disk.
    expect(readdirSync(byBytes.directory)).toHaveLength(2);
  });

  it('finds what a previous process left, in order, without its half-written files, and goes on numbering after it', async () => {
    let now = 1_000;
    const dir = directory();
    const before = await WebhookSpool.open(dir, LARGE, () => now);
    for (const [pipeline, uuid] of [
      [7, 'a'],
      [8, 'b'],
      [7, 'c'],
    ] as const) {
      await before.add(hook(pipeline, uuid));
      now += 1000;
    }
    await before.remove(before.entries()[0]);
    // A process killed mid-write leaves its temporary file behind: that hook was never answered 2xx.
    writeFileSync(join(dir, '.tmp-0000000000000009-7.hook.json'), '{"event":');

    const after = await WebhookSpool.open(dir, LARGE, () => now);
    expect(await uuidsIn(after)).toEqual(['b', 'c']);
    expect(after.holds(7)).toBe(true);
    expect(after.holds(8)).toBe(true);
    expect(after.depth()).toMatchObject({ hooks: 2, bytes: before.depth().bytes });
    expect(readdirSync(dir).some((name) => name.startsWith('.tmp-'))).toBe(false);
    await after.add(hook(8, 'd'));
    expect(await uuidsIn(after)).toEqual(['b', 'c', 'd']);
    expect(await uuidsIn(await WebhookSpool.open(dir, LARGE))).toEqual(['b', 'c', 'd']);
  });

  it('keeps what a previous process left even when the bounds have shrunk since, and takes nothing more until below them', async () => {
    const dir = directory();
    const before = await WebhookSpool.open(dir, LARGE);
    for (const uuid of ['a', 'b', 'c']) await before.add(hook(1, uuid));
    const after = await WebhookSpool.open(dir, { maxHooks: 2, maxBytes: LARGE.maxBytes });
    expect(await uuidsIn(after)).toEqual(['a', 'b', 'c']);
    expect(await after.add(hook(1, 'd'))).toBe('full');
  });

  it('says how old its oldest hook is', async () => {
    let now = 5_000;
    const spool = await WebhookSpool.open(directory(), LARGE, () => now);
    expect(spool.depth()).toEqual({ hooks: 0, bytes: 0, oldestSpooledAt: undefined });
    await spool.add(hook(1, 'a'));
    now = 9_000;
    await spool.add(hook(2, 'b'));
    expect(spool.depth().oldestSpooledAt).toBe(5_000);
  });

  it('throws when the disk refuses the write, and counts nothing for it', async () => {
    const dir = directory();
    const spool = await WebhookSpool.open(dir, LARGE);
    // The directory replaced by a file: every write fails as a full or read-only disk would.
    rmSync(dir, { recursive: true });
    writeFileSync(dir, '');
    await expect(spool.add(hook(1, 'a'))).rejects.toThrow();
    expect(spool.depth().hooks).toBe(0);
    expect(spool.holds(1)).toBe(false);
  });
});
