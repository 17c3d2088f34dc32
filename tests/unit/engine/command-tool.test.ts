import { describe, expect, it } from 'vitest';
import {
  commandEntryProblem,
  compilePolicy,
  decide,
  normalizeToolName,
  toolEntryProblem,
} from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

function cmdAllows(entry: string, binary: string): boolean {
  const p = compilePolicy(makePolicy({ commands: { mode: 'whitelist', allow: [entry], deny: [] } }));
  return decide('commands', { binary }, p).action === 'allow';
}

function toolAllows(entry: string, name: string): boolean {
  const p = compilePolicy(makePolicy({ tools: { mode: 'whitelist', allow: [entry], deny: [] } }));
  return decide('tools', { name, inputs: {} }, p).action === 'allow';
}

describe('command matching', () => {
  it.each([
    ['ls', '/usr/bin/ls', true],
    ['ls', '/bin/ls', true],
    ['ls', '/tmp/x/ls', true],
    ['ls', '/usr/bin/lsblk', false],
    ['ls', '/usr/bin/ls.bak', false],
    ['ls', 'ls', true],
    ['/usr/bin/ls', '/usr/bin/ls', true],
    ['/usr/bin/ls', '/bin/ls', false],
    ['/usr/bin/ls', '/usr/bin/../bin/ls', true],
    ['/usr/bin/ls', '//usr//bin/./ls', true],
    ['/usr/bin/ls', 'ls', false],
    ['/usr//bin/ls', '/usr/bin/ls', true],
    ['/usr/bin', '/usr/bin/ls', false], // a path entry is the binary, not a directory prefix
    ['python3', '/usr/bin/python3.11', false],
    ['LS', '/usr/bin/ls', false], // file names are case-sensitive
  ])('%s matches %s: %s', (entry, binary, expected) => {
    expect(cmdAllows(entry, binary)).toBe(expected);
  });

  it.each(['ls', 'python3.11', '/usr/bin/ls', '/usr/bin/../bin/ls', 'git-upload-pack'])('grammar accepts %s', (e) => {
    expect(commandEntryProblem(e)).toBeNull();
  });
  it.each([
    ['', 'empty'],
    ['./x', 'relative_path'],
    ['bin/x', 'relative_path'],
    ['../bin/x', 'relative_path'],
    ['~/bin/x', 'home_path'],
    ['rm -rf', 'arguments'],
    ['ls\t', 'arguments'],
    ['python*', 'glob_not_supported'],
    ['.', 'bad_name'],
    ['..', 'bad_name'],
    ['/', 'bad_name'],
  ])('grammar refuses %j as %s', (e, code) => {
    expect(commandEntryProblem(e)?.code).toBe(code);
  });
});

describe('tool names', () => {
  it.each([
    ['read_file', 'read_file', true],
    ['read_file', 'READ_FILE', true],
    ['read_file', '  read_file  ', true],
    ['read_file', 'ｒｅａｄ＿ｆｉｌｅ', true], // full-width
    ['read_file', 'read\u200b_file', true], // zero-width space
    ['read_file', 'read_\u200dfile', true], // zero-width joiner
    ['read_file', '\u202eread_file', true], // bidi override
    ['read_file', 'read\u00ad_file', true], // soft hyphen
    ['read_file', 'read_file\ufe0f', true], // variation selector
    ['read_file', '\ufeffread_file', true], // BOM
    ['read_file', 'read_file\u{E0041}', true], // tag character
    ['read_file', 'read_files', false],
    ['read_file', 'read-file', false],
    ['Straße', 'STRASSE', true],
    ['ﬁle', 'file', true], // ligature
    ['READ_FILE', 'read_file', true],
  ])('%j matches %j: %s', (entry, name, expected) => {
    expect(toolAllows(entry, name)).toBe(expected);
  });

  it('normalises to one canonical form', () => {
    expect(normalizeToolName('ＲＥＡＤ\u200b_File ')).toBe('read_file');
  });

  it.each([
    ['', 'empty'],
    ['   ', 'empty'],
    ['\u200b\u200d', 'empty'],
    [7, 'not_a_string'],
  ])('grammar refuses %j as %s', (e, code) => {
    expect(toolEntryProblem(e)?.code).toBe(code);
  });
  it('normalises a look-alike right after the plain names it folds to (the last two are remembered)', () => {
    for (let round = 0; round < 3; round++) {
      expect(normalizeToolName('tools/call')).toBe('tools/call');
      expect(normalizeToolName('read_file')).toBe('read_file');
      // Same length as a remembered name, and folds to it: still folded, never passed as it came.
      expect(normalizeToolName('READ_FILE')).toBe('read_file');
      expect(normalizeToolName('Tools/Call')).toBe('tools/call');
      expect(normalizeToolName('read_fil\u200b')).toBe('read_fil');
      expect(normalizeToolName('')).toBe('');
    }
  });

  it('grammar accepts a normal name', () => {
    expect(toolEntryProblem('github.create_issue')).toBeNull();
  });
});
