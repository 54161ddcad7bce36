import { GrantStore } from '../../src/grants/grant';
import { TracedWorkStore } from '../../src/traced-work/traced-work';
import { testGrant } from '../helpers/grants';
import { StoreWorld, testTracedJob } from './store-world';

const grant = testGrant;

/** One behaviour, every grant store (SPEC §4, §7): whatever passes here holds for each deployment. */
export function behavesAsAGrantStore(world: StoreWorld) {
  describe(`${world.name} grant store`, () => {
    let grants: GrantStore;
    let tracedWork: TracedWorkStore;
    beforeEach(async () => ({ grants, tracedWork } = await world.open()));
    afterEach(() => world.close());

    it('gives back the grant it was given', async () => {
      expect(await grants.saveGrant(grant())).toEqual(grant({ expiresAt: expect.any(Number) as unknown as number }));
      expect(await grants.findGrant(1001)).toEqual(grant({ expiresAt: expect.any(Number) as unknown as number }));
    });

    it('knows nothing of a job it never saw', async () => {
      expect(await grants.findGrant(424242)).toBeNull();
    });

    it('replaces the grant of a job picked up again, never keeping two', async () => {
      await grants.saveGrant(grant({ runnerId: 17 }));
      await grants.saveGrant(grant({ runnerId: 18 }));
      expect((await grants.findGrant(1001))?.runnerId).toBe(18);
    });

    it('keeps grants of different jobs apart', async () => {
      await grants.saveGrant(grant({ jobId: 1, traceId: '1'.repeat(32) }));
      await grants.saveGrant(grant({ jobId: 2, traceId: '2'.repeat(32) }));
      expect((await grants.findGrant(1))?.traceId).toBe('1'.repeat(32));
      expect((await grants.findGrant(2))?.traceId).toBe('2'.repeat(32));
    });

    it('forgets a grant at its expiry', async () => {
      await grants.saveGrant(grant({ expiresAt: world.now() + 300 }));
      expect(await grants.findGrant(1001)).not.toBeNull();
      await world.elapse(450);
      expect(await grants.findGrant(1001)).toBeNull();
    });

    it('does not store a grant that has already expired', async () => {
      await grants.saveGrant(grant({ expiresAt: world.now() - 1 }));
      expect(await grants.findGrant(1001)).toBeNull();
    });

    it('keeps the expiry of the first pickup when a job is decorated again (SPEC §4)', async () => {
      const expiresAt = world.now() + 60_000;
      await grants.saveGrant(grant({ expiresAt }));
      const again = await grants.saveGrant(grant({ expiresAt: expiresAt + 3_600_000, runnerId: 18 }));
      expect(again).toMatchObject({ expiresAt, runnerId: 18 });
      expect(await grants.findGrant(1001)).toMatchObject({ expiresAt, runnerId: 18 });
      // The record itself still goes at the first expiry, not an hour later.
      await grants.saveGrant(grant({ jobId: 1002, expiresAt: world.now() + 300 }));
      await grants.saveGrant(grant({ jobId: 1002, expiresAt: world.now() + 60_000 }));
      await world.elapse(450);
      expect(await grants.findGrant(1002)).toBeNull();
    });

    it('starts a new grant for a job picked up again after its first grant ended', async () => {
      await grants.saveGrant(grant({ expiresAt: world.now() + 300 }));
      await world.elapse(450);
      const expiresAt = world.now() + 60_000;
      expect(await grants.saveGrant(grant({ expiresAt, runnerId: 18 }))).toMatchObject({ expiresAt, runnerId: 18 });
      expect(await grants.findGrant(1001)).toMatchObject({ expiresAt, runnerId: 18 });
    });

    it('keeps ids beyond 10^14 exact when a job is decorated again', async () => {
      const big = {
        jobId: 2 ** 53 - 1,
        projectId: 2 ** 53 - 3,
        pipelineId: 123_456_789_012_345,
        rootPipelineId: 123_456_789_012_344,
        runnerId: 987_654_321_098_765,
      };
      const first = await grants.saveGrant(grant(big));
      const again = await grants.saveGrant(grant({ ...big, expiresAt: first.expiresAt + 60_000 }));
      expect(again).toEqual(first);
      expect(await grants.findGrant(big.jobId)).toEqual(first);
    });

    it('never lifts a revocation when a revoked job is decorated again (SPEC §4)', async () => {
      await grants.saveGrant(grant());
      const revokedAt = world.now() + 1000;
      await grants.revokeGrant(1001, revokedAt);
      expect((await grants.saveGrant(grant()))?.revokedAt).toBe(revokedAt);
      expect((await grants.findGrant(1001))?.revokedAt).toBe(revokedAt);
      expect((await grants.findGrantByJobTokenDigest('b'.repeat(64)))?.revokedAt).toBe(revokedAt);
    });

    it('finds a grant by its job token digest, and forgets the old digest when the job is picked up again', async () => {
      await grants.saveGrant(grant({ jobTokenDigest: 'c'.repeat(64) }));
      expect((await grants.findGrantByJobTokenDigest('c'.repeat(64)))?.jobId).toBe(1001);
      await grants.saveGrant(grant({ jobTokenDigest: 'd'.repeat(64) }));
      expect(await grants.findGrantByJobTokenDigest('c'.repeat(64))).toBeNull();
      expect((await grants.findGrantByJobTokenDigest('d'.repeat(64)))?.jobId).toBe(1001);
      expect(await grants.findGrantByJobTokenDigest('e'.repeat(64))).toBeNull();
    });

    it('keeps a grant saved without its job token indexed out of the token lookup, and finds it by its job', async () => {
      await grants.saveGrant(grant({ jobTokenDigest: 'a'.repeat(64) }), undefined, { indexJobToken: false });
      expect(await grants.findGrantByJobTokenDigest('a'.repeat(64))).toBeNull();
      expect(await grants.findGrant(1001)).toMatchObject({ jobId: 1001, jobTokenDigest: 'a'.repeat(64) });
    });

    it('answers a job token asked about again from its grant as it is now: revoked, then gone', async () => {
      await grants.saveGrant(grant({ jobTokenDigest: 'f'.repeat(64), expiresAt: world.now() + 400 }));
      expect(await grants.findGrantByJobTokenDigest('f'.repeat(64))).toMatchObject({ jobId: 1001 });
      expect(await grants.findGrantByJobTokenDigest('f'.repeat(64))).not.toHaveProperty('revokedAt');
      const revokedAt = world.now();
      await grants.revokeGrant(1001, revokedAt);
      expect((await grants.findGrantByJobTokenDigest('f'.repeat(64)))?.revokedAt).toBe(revokedAt);
      await world.elapse(550);
      expect(await grants.findGrantByJobTokenDigest('f'.repeat(64))).toBeNull();
      // Picked up again after its grant ended: found again, by the new grant.
      await grants.saveGrant(grant({ jobTokenDigest: 'f'.repeat(64), projectId: 8 }));
      expect(await grants.findGrantByJobTokenDigest('f'.repeat(64))).toMatchObject({ jobId: 1001, projectId: 8 });
    });

    it('marks a grant revoked without shortening its life, and never pushes a revocation later', async () => {
      const expiresAt = world.now() + 60_000;
      await grants.saveGrant(grant({ expiresAt }));
      const revokedAt = world.now() + 1000;
      expect((await grants.revokeGrant(1001, revokedAt))?.revokedAt).toBe(revokedAt);
      expect((await grants.revokeGrant(1001, revokedAt + 5000))?.revokedAt).toBe(revokedAt);
      expect(await grants.findGrant(1001)).toMatchObject({ revokedAt, expiresAt });
      expect(await grants.revokeGrant(424242, revokedAt)).toBeNull();
    });

    it('remembers a traced job with its grant, in the same step, for at least a minute however short the grant', async () => {
      expect(await tracedWork.findTracedJob(5001)).toBeNull();
      await grants.saveGrant(testGrant({ jobId: 5001, expiresAt: world.now() + 300 }), testTracedJob());
      expect(await tracedWork.findTracedJob(5001)).toEqual(testTracedJob());
      await world.elapse(450);
      // The grant is gone; the job's end, told by a webhook later, still finds whose spans it is.
      expect(await grants.findGrant(5001)).toBeNull();
      expect(await tracedWork.findTracedJob(5001)).toEqual(testTracedJob());
    });

    it('takes back what one pickup wrote, and only that: not a grant that kept an earlier expiry, not a later pickup', async () => {
      const first = testGrant({ jobId: 5003, expiresAt: world.now() + 60_000 });
      const pickedUp = testTracedJob({ jobId: 5003, pickedUpAt: 1 });
      await grants.saveGrant(first, pickedUp);
      expect(await grants.withdrawGrant(first, pickedUp)).toBe(true);
      expect(await grants.findGrant(5003)).toBeNull();
      expect(await tracedWork.findTracedJob(5003)).toBeNull();
      expect(await grants.withdrawGrant(first, pickedUp)).toBe(false);

      // Decorated again: the grant keeps the first pickup's expiry, so the second pickup's withdrawal leaves it.
      await grants.saveGrant(first, pickedUp);
      const again = testGrant({ jobId: 5003, expiresAt: world.now() + 120_000 });
      const pickedUpAgain = testTracedJob({ jobId: 5003, pickedUpAt: 2 });
      await grants.saveGrant(again, pickedUpAgain);
      expect(await grants.withdrawGrant(again, pickedUpAgain)).toBe(false);
      // And a withdrawal of the first pickup, which a later one replaced, leaves the later one's record.
      expect(await grants.withdrawGrant(first, pickedUp)).toBe(false);
      expect((await grants.findGrant(5003))?.expiresAt).toBe(first.expiresAt);
      expect((await tracedWork.findTracedJob(5003))?.pickedUpAt).toBe(2);
    });

    it('remembers no traced job for a grant saved without one, and the newest pickup of a job decorated again', async () => {
      await grants.saveGrant(testGrant({ jobId: 5002 }));
      expect(await tracedWork.findTracedJob(5002)).toBeNull();
      await grants.saveGrant(testGrant({ jobId: 5002 }), testTracedJob({ jobId: 5002, pickedUpAt: 1 }));
      await grants.saveGrant(testGrant({ jobId: 5002 }), testTracedJob({ jobId: 5002, pickedUpAt: 2 }));
      expect((await tracedWork.findTracedJob(5002))?.pickedUpAt).toBe(2);
    });
  });
}
