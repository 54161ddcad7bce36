import fc from 'fast-check';
import { cursorAt, CursorProblem, offsetOf, Page, pageOf, questionDigest, Shaped } from './answer-budget';

/** Every page of `shaped`, following each answer's cursor as an agent would. */
function allPages(shaped: Shaped, budget: number, question = 'q'): Page[] {
  const pages: Page[] = [];
  let cursor: string | undefined;
  do {
    const page = pageOf(shaped, offsetOf(cursor, question), budget, (next) => cursorAt(next, question));
    pages.push(page);
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined && pages.length < 10_000);
  return pages;
}

describe('an answer within its budget, the rest behind a cursor (SPEC §14)', () => {
  const item = (index: number, size: number) => ({ name: `job-${index}`, note: 'x'.repeat(size), seconds: 1000 - index });

  it('pages through a long list in order, without losing or repeating an item, every page within the budget', () => {
    fc.assert(
      fc.property(fc.array(fc.nat({ max: 300 }), { maxLength: 200 }), fc.integer({ min: 1500, max: 9000 }), (sizes, budget) => {
        const items = sizes.map((size, index) => item(index, size));
        const shaped: Shaped = { head: { largest: items[0] ?? null, pipelines_considered: 30 }, listKey: 'jobs', items };
        const pages = allPages(shaped, budget);
        expect(pages.flatMap((page) => page.jobs as unknown[])).toEqual(items);
        for (const page of pages) {
          expect(JSON.stringify(page).length).toBeLessThanOrEqual(budget);
          // The finding stays the first key on every page, the cursor the last.
          expect(Object.keys(page)).toEqual(['largest', 'pipelines_considered', 'jobs', 'next_cursor']);
        }
        expect(pages.at(-1)!.next_cursor).toBeNull();
      }),
    );
  });

  it('fills a page as far as the budget allows, not one item less', () => {
    const items = Array.from({ length: 50 }, (_, index) => item(index, 100));
    const shaped: Shaped = { head: { largest: null }, listKey: 'jobs', items };
    const page = pageOf(shaped, 0, 2000, (next) => cursorAt(next, 'q'));
    const shown = (page.jobs as unknown[]).length;
    const withOneMore = { ...page, jobs: items.slice(0, shown + 1) };
    expect(JSON.stringify(page).length).toBeLessThanOrEqual(2000);
    expect(JSON.stringify(withOneMore).length).toBeGreaterThan(2000);
  });

  it('gives at least one item a page while any is left, so following cursors always ends', () => {
    const items = [item(0, 5000), item(1, 5000)];
    const pages = allPages({ head: { largest: null }, listKey: 'jobs', items }, 2000);
    expect(pages.map((page) => (page.jobs as unknown[]).length)).toEqual([1, 1]);
  });

  it('answers an empty list with no cursor', () => {
    expect(pageOf({ head: { largest: null }, listKey: 'jobs', items: [] }, 0, 8000, () => 'never')).toEqual({ largest: null, jobs: [], next_cursor: null });
  });

  it('refuses a cursor of another question (another tool, pipeline or window), and one it never gave', () => {
    const question = questionDigest('compare_pipeline', { project_id: 7, pipeline_id: 500 });
    const cursor = cursorAt(40, question);
    expect(offsetOf(cursor, questionDigest('compare_pipeline', { project_id: 7, pipeline_id: 500, cursor }))).toBe(40);
    expect(() => offsetOf(cursor, questionDigest('compare_pipeline', { project_id: 7, pipeline_id: 501 }))).toThrow(CursorProblem);
    expect(() => offsetOf(cursor, questionDigest('list_waste', { project_id: 7, pipeline_id: 500 }))).toThrow(/another question/);
    for (const forged of ['not a cursor', Buffer.from('{"o":-1,"q":"x"}').toString('base64url'), Buffer.from('[1]').toString('base64url')]) {
      expect(() => offsetOf(forged, question)).toThrow(/not a cursor this server gave/);
    }
  });

  it('names the same question the same whatever order its arguments came in', () => {
    expect(questionDigest('list_waste', { project_id: 7, from: 'a', to: 'b' })).toBe(questionDigest('list_waste', { to: 'b', from: 'a', project_id: 7 }));
    expect(questionDigest('list_waste', { project_id: 7, from: 'a' })).not.toBe(questionDigest('list_waste', { project_id: 7, from: 'b' }));
  });
});
