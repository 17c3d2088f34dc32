import { describe, expect, it, vi } from 'vitest';
import { createReconciler } from '../../../../src/control/reconcile/loop.js';

function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe('reconcile coalescing', () => {
  it('coalesces signals during a pass into exactly one further pass', async () => {
    const gates = [gate(), gate()];
    let inPass = 0;
    let maxConcurrent = 0;
    const r = createReconciler({
      pass: async () => {
        inPass++;
        maxConcurrent = Math.max(maxConcurrent, inPass);
        await gates[r.passes - 1]?.p;
        inPass--;
      },
    });
    const first = r.trigger();
    const during = [r.trigger(), r.trigger(), r.trigger()];
    expect(r.passes).toBe(1);
    gates[0]!.open();
    await first;
    gates[1]!.open();
    await Promise.all(during);
    expect(r.passes).toBe(2);
    expect(maxConcurrent).toBe(1);
    await r.trigger();
    expect(r.passes).toBe(3);
  });

  it('arms a watchdog per pass and keeps going after a failed pass', async () => {
    vi.useFakeTimers();
    try {
      const onSlow = vi.fn();
      const onError = vi.fn();
      const g = gate();
      let n = 0;
      const r = createReconciler({
        slowMs: 30_000,
        onSlow,
        onError,
        pass: async () => {
          n++;
          if (n === 1) await g.p;
          else throw new Error('nft failed');
        },
      });
      const p = r.trigger();
      await vi.advanceTimersByTimeAsync(29_000);
      expect(onSlow).not.toHaveBeenCalled();
      await vi.advanceTimersByTimeAsync(2_000);
      expect(onSlow).toHaveBeenCalledTimes(1);
      g.open();
      await p;
      await r.trigger();
      expect(onError).toHaveBeenCalledTimes(1);
      expect(r.passes).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });
});
