import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

let ticksPerSecond: number | undefined;

/** USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on every common Linux build). */
function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** Fields of /proc/<pid>/stat after the `(comm)` one, which may itself hold spaces and parentheses. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined; // gone
  }
}

/**
 * CPU time (user + system) a process has used so far, in µs, read from outside the process
 * (/proc/<pid>/stat, resolution one clock tick: 10 ms). NaN when the process is gone.
 */
export function procCpuMicros(pid: number): number {
  const { user, system } = procCpuTimes(pid);
  return user + system;
}

/** procCpuMicros split into user and system (kernel: syscalls, and on loopback the peer's TCP receive path too). */
export function procCpuTimes(pid: number): { user: number; system: number } {
  const fields = statFields(pid);
  if (fields === undefined) return { user: Number.NaN, system: Number.NaN };
  // fields[0] is field 3 (state): utime is field 14, stime field 15.
  const micros = (ticks: string) => (Number(ticks) / clockTicksPerSecond()) * 1e6;
  return { user: micros(fields[11]), system: micros(fields[12]) };
}

/** Pids whose parent is `ppid` (e.g. an nginx master's workers). */
export function childPids(ppid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fields = statFields(Number(entry));
    if (fields !== undefined && Number(fields[1]) === ppid) children.push(Number(entry));
  }
  return children;
}
