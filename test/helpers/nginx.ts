import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from './ports';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path));

export interface NginxServer {
  readonly url: string;
  readonly port: number;
  /** What nginx wrote to its access and error logs so far. */
  logs(): string;
  stop(): Promise<void>;
}

/** The `envsubst '…'` command a template's header documents, with the variable list it names. */
export function documentedEnvsubst(template: string): { readonly command: string; readonly variables: string[] } {
  const found = /^#\s+(envsubst '([^']*)')/m.exec(template);
  if (found === null) throw new Error("the template's header documents no `envsubst '${…}'` command");
  return { command: found[1], variables: [...found[2].matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((match) => match[1]) };
}

/**
 * Real nginx (Debian's package) on a free port, with a configuration template from the repository,
 * filled exactly as its header tells operators to: envsubst with the variable list it documents,
 * given `variables` (plus LISTEN_PORT) in its environment.
 */
export async function startNginx(templatePath: string, variables: Record<string, string>): Promise<NginxServer> {
  if (NGINX === undefined) throw new Error('nginx is not installed: run `npm test` (it installs it) or `apt-get install -y nginx-light`');
  const prefix = mkdtempSync(join(tmpdir(), 'cjt-nginx-'));
  for (const dir of ['logs', 'tmp']) mkdirSync(join(prefix, dir));
  const port = await freePort();
  const values: Record<string, string> = { LISTEN_PORT: String(port), ACCESS_LOG: join(prefix, 'logs', 'access.log'), ...variables };
  const template = readFileSync(templatePath, 'utf8');
  const { variables: listed } = documentedEnvsubst(template);
  const envsubst = spawnSync('envsubst', [listed.map((name) => `\${${name}}`).join(' ')], {
    input: template,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, ...values },
  });
  if (envsubst.error !== undefined || envsubst.status !== 0) {
    throw new Error(`envsubst failed (install gettext-base): ${envsubst.error?.message ?? envsubst.stderr}`);
  }
  const site = envsubst.stdout;
  // The example is a server block for conf.d; the test wraps it in a minimal main configuration.
  writeFileSync(
    join(prefix, 'nginx.conf'),
    `worker_processes 1;
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log ${prefix}/logs/access.log;
  client_body_temp_path ${prefix}/tmp/body;
  proxy_temp_path ${prefix}/tmp/proxy;
  fastcgi_temp_path ${prefix}/tmp/fastcgi;
  uwsgi_temp_path ${prefix}/tmp/uwsgi;
  scgi_temp_path ${prefix}/tmp/scgi;
${site}
}
`,
  );
  const child: ChildProcess = spawn(NGINX, ['-p', prefix, '-c', join(prefix, 'nginx.conf'), '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(`nginx on ${port}`, async () => {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
    await fetch(url, { method: 'HEAD' });
    return true;
  });
  return {
    url,
    port,
    logs: () =>
      ['access.log', 'error.log'].map((name) => (existsSync(join(prefix, 'logs', name)) ? readFileSync(join(prefix, 'logs', name), 'utf8') : '')).join('\n'),
    stop: async () => {
      if (child.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGQUIT');
      });
    },
  };
}
