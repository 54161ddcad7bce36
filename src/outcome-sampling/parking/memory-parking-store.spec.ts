import { behavesAsAParkingStore } from '../../../test/suites/parking-store.suite';
import { memoryWorld } from '../../../test/suites/store-world';
import { MemoryParkingStore } from './memory-parking-store';

behavesAsAParkingStore(memoryWorld());

describe('the memory parking store over a long life', () => {
  it('forgets facts, decisions and untraced jobs’ statuses past their time even when nothing reads them again', async () => {
    jest.useFakeTimers();
    let now = 0;
    const parking = new MemoryParkingStore(() => now, 60_000);
    const held = () => {
      const maps = parking as unknown as Record<'facts' | 'decisions' | 'pipelineJobStatuses', Map<unknown, unknown>>;
      return maps.facts.size + maps.decisions.size + maps.pipelineJobStatuses.size;
    };
    // A day of pipelines, each remembered a minute: noted once, decided once, never read again.
    for (let pipeline = 0; pipeline < 3000; pipeline++) {
      const trace = pipeline.toString(16).padStart(32, '0');
      await parking.notePipelineJobStatuses(pipeline, ['failed'], 60_000);
      await parking.noteFacts(trace, { statuses: ['failed'] }, 60_000);
      await parking.decide(trace, { keep: true, reason: 'failed' }, 60_000);
      now += 30_000;
      jest.advanceTimersByTime(30_000);
    }
    // What the last minute wrote, and at most one sweep interval's more: not 9,000 records.
    expect(held()).toBeLessThanOrEqual(12);
    expect(await parking.jobStatusesOf(2999)).toEqual(['failed']);
    parking.close();
    jest.useRealTimers();
  });
});
