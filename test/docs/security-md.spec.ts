import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

/**
 * SECURITY.md names the test that defends each line as `file › test name` (more names of the same
 * file as `› name`). A renamed or deleted test must not leave a line claiming a defence it lost.
 */
describe('SECURITY.md', () => {
  const references: Array<{ file: string; name: string }> = [];
  for (const line of readFileSync(join(ROOT, 'SECURITY.md'), 'utf8').split('\n')) {
    let file: string | undefined;
    for (const [, reference] of line.matchAll(/`([^`]+)`/g)) {
      const parts = reference.split(' › ');
      if (/^(src|test)\/.*\.ts$/.test(parts[0])) {
        file = parts.shift();
        if (parts.length === 0) references.push({ file: file!, name: '' });
      } else if (reference.startsWith('› ')) {
        parts[0] = reference.slice(2);
      } else if (parts.length === 1) {
        continue;
      }
      if (file !== undefined) for (const name of parts) references.push({ file, name });
    }
  }

  it('defends its lines with tests', () => {
    expect(references.length).toBeGreaterThan(40);
  });

  it.each(references.map(({ file, name }) => [file, name]))('names a test that exists: %s › %s', (file, name) => {
    expect(existsSync(join(ROOT, file))).toBe(true);
    expect(readFileSync(join(ROOT, file), 'utf8')).toContain(name);
  });
});
