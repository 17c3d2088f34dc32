/**
 * SIGHUP coalescing for the reconcile: a signal that arrives during a pass never re-enters the
 * half-applied one; any number of them become exactly one further pass afterwards. Each pass is
 * armed with a watchdog: past `slowMs` (30 s) `onSlow` runs once (the service dumps every stack to
 * the journal), and the pass is left to finish.
 */
export interface ReconcilerOptions<T = void> {
  /** One pass; what it returns is what the triggers it covers resolve with (a pass that threw: undefined). */
  pass: () => Promise<T>;
  slowMs?: number;
  onSlow?: () => void;
  onError?: (e: unknown) => void;
}

export function createReconciler<T = void>(opts: ReconcilerOptions<T>) {
  const slowMs = opts.slowMs ?? 30_000;
  let running: Promise<void> | null = null;
  let pending: { promise: Promise<T | undefined>; resolve: (v: T | undefined) => void } | null = null;
  let closed = false;
  let passes = 0;

  const runPass = async (): Promise<T | undefined> => {
    passes++;
    const timer = setTimeout(() => opts.onSlow?.(), slowMs);
    try {
      return await opts.pass();
    } catch (e) {
      opts.onError?.(e);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  const loop = async (firstDone: (v: T | undefined) => void): Promise<void> => {
    firstDone(await runPass());
    while (pending) {
      const p = pending;
      pending = null;
      p.resolve(await runPass());
    }
    running = null;
  };

  return {
    get passes() {
      return passes;
    },
    /** Requests a pass; resolves when a pass that started after this request has finished, with what it returned. */
    trigger(): Promise<T | undefined> {
      if (closed) return Promise.resolve(undefined);
      if (!running) {
        let done!: (v: T | undefined) => void;
        const first = new Promise<T | undefined>((r) => (done = r));
        running = loop(done);
        return first;
      }
      if (!pending) {
        let resolve!: (v: T | undefined) => void;
        const promise = new Promise<T | undefined>((r) => (resolve = r));
        pending = { promise, resolve };
      }
      return pending.promise;
    },
    /** Waits for the running pass (and a pending one) to finish; later triggers are ignored. */
    async close(): Promise<void> {
      closed = true;
      while (running) await running;
    },
  };
}
