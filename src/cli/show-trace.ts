import { traceCommand } from './trace-command';

/** `npm run -s trace [-- <trace id> | --compare <pipeline id> …]`: src/cli/trace-command.ts, on this process's streams. */
void traceCommand(process.argv.slice(2), process.env, {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
}).then((status) => {
  process.exitCode = status;
});
