import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppConfig, loadConfig, valueOf, VARIABLE_NAMES } from '../../src/config/app-config';

const ROOT = join(__dirname, '..', '..');
const MIB = 1024 * 1024;

interface Row {
  readonly line: string;
  readonly names: string[];
  /** One default per name, or one for all of them (`unset`, `none`). */
  readonly defaults: string[];
}

/** The configuration table of docs/configuration.md: a row names one variable or several (`A` / `B`), with their defaults the same way. */
function configurationTable(): Row[] {
  const page = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');
  const section = page.split(/^# Configuration$/m)[1]?.split(/^#{1,2} /m)[0];
  if (section === undefined) throw new Error('docs/configuration.md has no "# Configuration" heading');
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => {
      const [names, defaults] = line.replace(/^\|\s*/, '').split(/\s+\|\s+/);
      return { line, names: [...names.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map(([, name]) => name), defaults: defaults.split(' / ') };
    });
}

/**
 * Whether a documented default says what the service runs with. Literals are in backticks; `<NAME>` stands
 * for another variable's default; sizes may be written in MiB; no value is `unset` (or generated), none.
 */
function documents(text: string, value: unknown, defaults: AppConfig): boolean {
  if (value === undefined || (Array.isArray(value) && value.length === 0)) return /^(unset|none|generated)\b/.test(text);
  const mebibytes = /^(\d+) MiB$/.exec(text);
  if (mebibytes !== null) return Number(mebibytes[1]) * MIB === value;
  const literal = /^`([^`]*)`/.exec(text)?.[1];
  if (literal === undefined) return false;
  const expanded = literal.replace(/<([A-Z][A-Z0-9_]*)>/g, (_, name: string) => String(valueOf(defaults, name)));
  return expanded === (Array.isArray(value) ? value.join(',') : String(value));
}

describe("docs/configuration.md's table", () => {
  const rows = configurationTable();
  const defaults = loadConfig({});
  const documented = new Map(
    rows.flatMap((row) => row.names.map((name, i) => [name, { row, text: row.defaults.length === 1 ? row.defaults[0] : row.defaults[i] }])),
  );

  it('is there', () => {
    expect(rows.length).toBeGreaterThan(30);
  });

  it.each([...VARIABLE_NAMES].sort())('documents %s with its default', (name) => {
    const entry = documented.get(name);
    expect({ name, documented: entry !== undefined }).toEqual({ name, documented: true });
    const value = valueOf(defaults, name);
    expect({ name, line: entry!.row.line, default: entry!.text, matches: documents(entry!.text ?? '', value, defaults) }).toEqual({
      name,
      line: entry!.row.line,
      default: entry!.text,
      matches: true,
    });
  });

  it('names no variable the service does not read', () => {
    expect([...documented.keys()].filter((name) => !VARIABLE_NAMES.has(name))).toEqual([]);
  });

  it('gives every row of several variables one default, or one for each', () => {
    for (const row of rows)
      expect({ line: row.line, ok: row.defaults.length === 1 || row.defaults.length === row.names.length }).toEqual({ line: row.line, ok: true });
  });
});
