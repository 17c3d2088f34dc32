/**
 * `leash console`: the web console in this process (docs/console.md), until SIGINT/SIGTERM.
 *   leash console [--listen 127.0.0.1:8470] [--socket PATH] [--tls-cert F --tls-key F]
 *   leash console --url        print the URL (with its token) of the console already running
 * It prints the URL with the token once (the token is in the fragment: a browser never sends it).
 */
import fs from 'node:fs';
import { Command, Option } from 'commander';
import { LeashError } from '../errors.js';
import { launchConsole, tokenFile } from '../control/console/launch.js';
import { loadConfig } from '../control/config/load.js';
import { configPath, print } from './context.js';
import { stateDirOf } from './policy-common.js';

interface Opts {
  listen?: string;
  socket?: string;
  tlsCert?: string;
  tlsKey?: string;
  stateDir?: string;
  url?: boolean;
  approvalsSocket?: string;
}

export function register(program: Command): void {
  program
    .command('console')
    .description('serve the web console: subjects, live decisions, approvals, profiles, charts (docs/console.md)')
    .option('--listen <host:port>', 'also serve on this TCP address (loopback, or any with --tls-cert/--tls-key)')
    .option('--socket <path>', 'the unix socket (default console.socket, /run/leash/console.sock)')
    .option('--tls-cert <file>', 'PEM certificate: serve HTTPS on --listen')
    .option('--tls-key <file>', 'PEM key for --tls-cert')
    .option('--state-dir <dir>', 'policy state directory (env LEASH_STATE_DIR)')
    .option('--url', 'print the URL and token of the console already serving on the socket, and exit')
    .addOption(new Option('--approvals-socket <path>', 'the approvals socket').env('LEASH_APPROVALS_SOCKET'))
    .action(async (o: Opts, cmd: Command) => {
      const file = configPath(cmd);
      let loaded = loadConfig(file);
      const socket = o.socket ?? loaded.config.console.socket;
      if (o.url) {
        let text: string;
        try {
          text = fs.readFileSync(tokenFile(socket), 'utf8');
        } catch (e) {
          throw new LeashError(
            'console_unavailable',
            `no console is serving on ${socket} (${(e as NodeJS.ErrnoException).code ?? 'unreadable'})`,
          );
        }
        const [token, url] = text.split('\n');
        print(url ? url : `token ${token} (socket ${socket}; no TCP port)`);
        return;
      }
      if (!!o.tlsCert !== !!o.tlsKey) throw new LeashError('usage', '--tls-cert and --tls-key go together');
      const listen = o.listen ?? loaded.config.console.listen;
      const tls = o.tlsCert && o.tlsKey ? { cert: o.tlsCert, key: o.tlsKey } : loaded.config.console.tls;
      if (listen !== null && tls === null) {
        // The same rule as the config's: a non-loopback address only with TLS.
        const host = /^(?:\[([^\]]+)\]|([^:]+)):\d{1,5}$/.exec(listen);
        const h = host?.[1] ?? host?.[2] ?? '';
        if (!host || !(h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)))
          throw new LeashError('usage', `--listen ${listen}: a non-loopback address needs --tls-cert and --tls-key`);
      }
      const srv = await launchConsole({
        config: () => loaded.config,
        stateDir: stateDirOf(o),
        socket,
        listen,
        tls,
        ...(o.approvalsSocket ? { approvalsSocket: o.approvalsSocket } : {}),
        onError: (e) => process.stderr.write(`console: ${e.message}\n`),
      });
      print(`console on ${socket}${srv.port !== null ? ` and port ${srv.port}` : ''}`);
      if (srv.url) print(`open ${srv.url}`);
      else print(`token ${srv.token}`);
      const onHup = () => {
        try {
          loaded = loadConfig(file);
        } catch (e) {
          process.stderr.write(`console: config reload refused, old one kept: ${(e as Error).message}\n`);
        }
      };
      process.on('SIGHUP', onHup);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      process.off('SIGHUP', onHup);
      await srv.close();
    });
}
