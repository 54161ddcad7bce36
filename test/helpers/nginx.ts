import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from './ports';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((path) => existsSync(path));

/**
 * The log files of a started nginx, under its prefix's logs/: `error` the main error log at nginx's default
 * level (`error_log logs/error.log;`, as Debian's nginx.conf has it), `access` the http-level access log in
 * nginx's default `combined` format (`access_log logs/access.log;`, as Debian's), and `example` the file
 * given to the template as ACCESS_LOG.
 */
export const NGINX_LOGS = { error: 'error.log', access: 'access.log', example: 'example.access.log' } as const;
export type NginxLog = keyof typeof NGINX_LOGS;

export interface NginxServer {
  readonly url: string;
  readonly port: number;
  /** What nginx wrote to one of its logs so far ('' while the file does not exist). */
  log(name: NginxLog): string;
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
 * given `variables` (plus LISTEN_PORT, ACCESS_LOG and CAPABILITY_HOP, a second free loopback port,
 * unless given) in its environment. The main configuration around it logs as Debian's does.
 */
export async function startNginx(templatePath: string, variables: Record<string, string>): Promise<NginxServer> {
  if (NGINX === undefined) throw new Error('nginx is not installed: run `npm test` (it installs it) or `apt-get install -y nginx-light`');
  const prefix = mkdtempSync(join(tmpdir(), 'cjt-nginx-'));
  for (const dir of ['logs', 'tmp']) mkdirSync(join(prefix, dir));
  const port = await freePort();
  const values: Record<string, string> = {
    LISTEN_PORT: String(port),
    ACCESS_LOG: join(prefix, 'logs', NGINX_LOGS.example),
    CAPABILITY_HOP: `127.0.0.1:${await freePort()}`,
    ...variables,
  };
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
error_log ${prefix}/logs/${NGINX_LOGS.error};
events { worker_connections 256; }
http {
  access_log ${prefix}/logs/${NGINX_LOGS.access};
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
  const log = (name: NginxLog) => {
    const file = join(prefix, 'logs', NGINX_LOGS[name]);
    return existsSync(file) ? readFileSync(file, 'utf8') : '';
  };
  return {
    url,
    port,
    log,
    stop: async () => {
      if (child.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGQUIT');
      });
    },
  };
}
