/**
 * SIGHUP coalescing for the reconcile: a signal that arrives during a pass never re-enters the
 * half-applied one; any number of them become exactly one further pass afterwards. Each pass is
 * armed with a watchdog: past `slowMs` (30 s) `onSlow` runs once (the service dumps every stack to
 * the journal), and the pass is left to finish.
 */
export interface ReconcilerOptions {
  pass: () => Promise<void>;
  slowMs?: number;
  onSlow?: () => void;
  onError?: (e: unknown) => void;
}

export interface Reconciler {
  /** Requests a pass; resolves when a pass that started after this request has finished. */
  trigger(): Promise<void>;
  /** Waits for the running pass (and a pending one) to finish; later triggers are ignored. */
  close(): Promise<void>;
  readonly passes: number;
}

export function createReconciler(opts: ReconcilerOptions): Reconciler {
  const slowMs = opts.slowMs ?? 30_000;
  let running: Promise<void> | null = null;
  let pending: { promise: Promise<void>; resolve: () => void } | null = null;
  let closed = false;
  let passes = 0;

  const runPass = async (): Promise<void> => {
    passes++;
    const timer = setTimeout(() => opts.onSlow?.(), slowMs);
    try {
      await opts.pass();
    } catch (e) {
      opts.onError?.(e);
    } finally {
      clearTimeout(timer);
    }
  };

  const loop = async (firstDone: () => void): Promise<void> => {
    await runPass();
    firstDone();
    while (pending) {
      const p = pending;
      pending = null;
      await runPass();
      p.resolve();
    }
    running = null;
  };

  return {
    get passes() {
      return passes;
    },
    trigger(): Promise<void> {
      if (closed) return Promise.resolve();
      if (!running) {
        let done!: () => void;
        const first = new Promise<void>((r) => (done = r));
        running = loop(done);
        return first;
      }
      if (!pending) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => (resolve = r));
        pending = { promise, resolve };
      }
      return pending.promise;
    },
    async close(): Promise<void> {
      closed = true;
      while (running) await running;
    },
  };
}
