import { describe, expect, it } from 'vitest';
import type { ApplyAction } from '../../../../src/control/reconcile/plan.js';
import { applySideBySide, drive, type Driven } from '../../../../src/control/reconcile/execute.js';
import type { SurfaceName } from '../../../../src/dataplane/contract.js';

/** A surface whose apply is the given function; the rest is never called here. */
function surface(name: SurfaceName, apply: (a: ApplyAction[]) => Promise<Map<number, Error>>): Driven {
  const never = () => Promise.reject(new Error('not in this test'));
  return drive<ApplyAction>(
    {
      surface: name,
      apply,
      deny: never,
      orphan: never,
      enforcing: () => ({ surface: name, subjects: 0, uids: [] }),
      close: async () => {},
    },
    (a) => a,
  );
}

const actions = [{ uid: 1001 }, { uid: 1002 }] as unknown as ApplyAction[];
/** What each of n surfaces is handed: the same subjects. */
const each = (n: number) => Array.from({ length: n }, () => actions);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the surfaces apply a pass side by side', () => {
  it('runs every surface at once: one waiting on another still finishes', async () => {
    // The watcher's apply waits for the network's to have started: one after the other, this never ends.
    let networkStarted!: () => void;
    const started = new Promise<void>((r) => (networkStarted = r));
    const ms: Record<string, number> = {};
    const out = await Promise.race([
      applySideBySide(
        [
          surface('filesystem', async () => {
            await started;
            return new Map();
          }),
          surface('network', async () => {
            networkStarted();
            await sleep(30);
            return new Map();
          }),
        ],
        each(2),
        ms,
      ),
      sleep(2000).then(() => 'timed out'),
    ]);
    expect(out).toEqual(new Map());
    expect(ms.network).toBeGreaterThanOrEqual(25);
    expect(ms.filesystem).toBeLessThan(ms.network!); // it ended once the network's had started
  });

  it("fails a subject that failed on any surface, with the first surface's error", async () => {
    const fs1 = new Error('map refused');
    const net1 = new Error('chain refused');
    const net2 = new Error('listener refused');
    const out = await applySideBySide(
      [
        surface('filesystem', async () => new Map([[1001, fs1]])),
        surface(
          'network',
          async () =>
            new Map([
              [1001, net1],
              [1002, net2],
            ]),
        ),
        surface('tools', async () => new Map()),
      ],
      each(3),
      {},
    );
    expect(out).toEqual(
      new Map([
        [1001, fs1],
        [1002, net2],
      ]),
    );
  });

  it('a surface that throws throws only after every other surface has finished', async () => {
    let networkDone = false;
    const boom = new Error('watcher gone');
    await expect(
      applySideBySide(
        [
          surface('filesystem', async () => {
            throw boom;
          }),
          surface('network', async () => {
            await sleep(50);
            networkDone = true;
            return new Map();
          }),
        ],
        each(2),
        {},
      ),
    ).rejects.toBe(boom);
    // Nothing may deny a subject while a surface is still applying it.
    expect(networkDone).toBe(true);
  });

  it("adds each surface's time to what the pass has already counted", async () => {
    const ms: Record<string, number> = { network: 1000 };
    await applySideBySide([surface('network', async () => new Map())], each(1), ms);
    expect(ms.network).toBeGreaterThanOrEqual(1000);
    expect(ms.network).toBeLessThan(1500);
  });
});
