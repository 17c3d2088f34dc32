// readPolicyFile reads a file of any size up to the cap byte for byte, with a buffer sized to the file (not to the
// cap: the service reads every subject's profile on each reconcile), and refuses one byte more.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_FILE_BYTES, readPolicyFile } from '../../../../src/formats/yaml.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-readfile-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('readPolicyFile', () => {
  it.each([0, 1, 4095, 4096, 4097, 65_537, MAX_FILE_BYTES])('reads a file of %i bytes exactly', (size) => {
    const f = path.join(dir, `f${size}`);
    const text = Array.from({ length: size }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');
    fs.writeFileSync(f, text);
    expect(readPolicyFile(f)).toBe(text);
  });

  it('refuses a file one byte over the cap (config_too_large)', () => {
    const f = path.join(dir, 'big');
    fs.writeFileSync(f, Buffer.alloc(MAX_FILE_BYTES + 1, 0x61));
    expect(() => readPolicyFile(f)).toThrow(expect.objectContaining({ code: 'config_too_large' }));
  });

  it('reads a file whose size the kernel reports as 0 but that has content (procfs), up to the cap', () => {
    const text = readPolicyFile('/proc/self/status');
    expect(text).toMatch(/^Name:/);
    expect(fs.statSync('/proc/self/status').size).toBe(0);
  });
});
