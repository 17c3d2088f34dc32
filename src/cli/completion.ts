import type { Command } from 'commander';
import { LeashError } from '../errors.js';

/** One command path (`''`, `'net'`, `'net remove'`) and the words that may follow it. */
export interface CompletionNode {
  path: string;
  subcommands: string[];
  options: string[];
}

/**
 * Walks the commander program: every command path with its subcommands (names and aliases) and its
 * options (long and short flags, plus --help). The completion scripts are generated from this, so
 * they list exactly what the program accepts.
 */
export function completionTree(program: Command): CompletionNode[] {
  const out: CompletionNode[] = [];
  const walk = (cmd: Command, path: string[]) => {
    const visible = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
    const options = new Set<string>();
    for (const o of cmd.options) {
      if (o.hidden) continue;
      if (o.long) options.add(o.long);
      if (o.short) options.add(o.short);
    }
    options.add('--help');
    if (path.length === 0) options.add('--version');
    out.push({
      path: path.join(' '),
      subcommands: visible.flatMap((c) => [c.name(), ...c.aliases()]),
      options: [...options],
    });
    for (const c of visible) for (const n of [c.name(), ...c.aliases()]) walk(c, [...path, n]);
  };
  walk(program, []);
  return out;
}

// Every word is a command or flag name commander accepted: [A-Za-z0-9-]. Anything else would need
// quoting in the generated shell; refuse it rather than emit a script that could misbehave.
function safe(words: string[]): string {
  for (const w of words) if (!/^[A-Za-z0-9][A-Za-z0-9-]*$|^--?[A-Za-z0-9][A-Za-z0-9-]*$/.test(w)) throw new Error(w);
  return words.join(' ');
}

function wordsCase(tree: CompletionNode[], indent: string): string {
  return tree.map((n) => `${indent}'${n.path}') echo '${safe([...n.subcommands, ...n.options])}' ;;`).join('\n');
}

/** The bash completion script (`complete -F _leash leash`). */
export function bashCompletion(program: Command): string {
  const tree = completionTree(program);
  return `# bash completion for leash, generated from its command definitions (leash completion bash).
_leash_words() {
  case "$1" in
${wordsCase(tree, '    ')}
  esac
}
_leash() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmdpath="" w i next
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case "$w" in -*) continue ;; esac
    next="\${cmdpath:+$cmdpath }$w"
    # Only a word that names a subcommand here descends; an option's value does not.
    if [[ " $(_leash_words "$cmdpath") " == *" $w "* ]] && [[ -n "$(_leash_words "$next")" ]]; then cmdpath="$next"; fi
  done
  COMPREPLY=($(compgen -W "$(_leash_words "$cmdpath")" -- "$cur"))
}
complete -F _leash leash
`;
}

/** The zsh completion script (`#compdef leash`, for a directory in $fpath). */
export function zshCompletion(program: Command): string {
  const tree = completionTree(program);
  return `#compdef leash
# zsh completion for leash, generated from its command definitions (leash completion zsh).
_leash_words() {
  case "$1" in
${wordsCase(tree, '    ')}
  esac
}
_leash() {
  local cmdpath="" w i next
  for ((i = 2; i < CURRENT; i++)); do
    w="\${words[i]}"
    [[ "$w" == -* ]] && continue
    next="\${cmdpath:+$cmdpath }$w"
    if [[ " $(_leash_words "$cmdpath") " == *" $w "* ]] && [[ -n "$(_leash_words "$next")" ]]; then cmdpath="$next"; fi
  done
  local -a cands
  cands=(\${=$(_leash_words "$cmdpath")})
  compadd -- $cands
}
_leash "$@"
`;
}

/** `leash completion bash|zsh`: prints the completion script for that shell. */
export function register(program: Command): void {
  program
    .command('completion')
    .description('print the shell completion script (bash or zsh), generated from these commands')
    .argument('<shell>', 'bash or zsh')
    .action((shell: string) => {
      let root: Command = program;
      while (root.parent) root = root.parent;
      if (shell === 'bash') process.stdout.write(bashCompletion(root));
      else if (shell === 'zsh') process.stdout.write(zshCompletion(root));
      else throw new LeashError('usage', `no completion for shell "${shell}": bash or zsh`, { shell });
    });
}
