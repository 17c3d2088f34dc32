/**
 * What a `git` command line does: git.read, git.write or git.remote, or null when it is ambiguous
 * (an option before the subcommand, a configuration override, an option that runs a program or
 * writes a file, a subcommand not listed here, an alias): the caller then judges it as shell.exec.
 */
import type { Operation } from './mappings.js';

const READ = new Set([
  'status',
  'log',
  'diff',
  'show',
  'blame',
  'shortlog',
  'describe',
  'rev-parse',
  'rev-list',
  'ls-files',
  'ls-tree',
  'cat-file',
  'grep',
  'reflog',
  'whatchanged',
  'show-ref',
  'name-rev',
  'merge-base',
  'count-objects',
]);
const WRITE = new Set([
  'add',
  'commit',
  'checkout',
  'switch',
  'restore',
  'reset',
  'rm',
  'mv',
  'merge',
  'rebase',
  'cherry-pick',
  'revert',
  'init',
  'clean',
  'apply',
  'am',
]);
const REMOTE = new Set(['push', 'pull', 'fetch', 'clone', 'remote', 'ls-remote', 'submodule']);

/** Subcommands that only list with these options (and write otherwise: `git branch NAME`). */
const LISTING: Record<string, Set<string>> = {
  branch: new Set([
    '-a',
    '--all',
    '-r',
    '--remotes',
    '-l',
    '--list',
    '-v',
    '-vv',
    '--verbose',
    '--show-current',
    '--no-color',
  ]),
  tag: new Set(['-l', '--list', '-n']),
  stash: new Set(['list', 'show']),
};

/** Options that make any subcommand run a program, read another config, or write a file. */
const UNSAFE_OPTION =
  /^(?:-c|--config(?:-env)?|--exec(?:-path)?|--upload-pack|--receive-pack|-u|--output|-o|--ext-diff|--textconv|--open-files-in-pager|-O)(?:=|$)/;

export function gitOperation(argv: readonly string[]): Operation | null {
  if (argv.length < 2) return null;
  const sub = argv[1]!;
  // An option before the subcommand (-C, -c, --git-dir, --work-tree, -p ...) changes what runs.
  if (sub.startsWith('-')) return null;
  const rest = argv.slice(2);
  if (rest.some((a) => UNSAFE_OPTION.test(a))) return null;
  if (READ.has(sub)) return 'git.read';
  if (WRITE.has(sub)) return 'git.write';
  if (REMOTE.has(sub)) return 'git.remote';
  const listing = LISTING[sub];
  if (listing !== undefined) {
    if (sub === 'stash') return rest.length > 0 && listing.has(rest[0]!) ? 'git.read' : 'git.write';
    return rest.every((a) => listing.has(a)) ? 'git.read' : 'git.write';
  }
  return null;
}
