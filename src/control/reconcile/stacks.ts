/**
 * Everything dumped when a reconcile pass runs past its watchdog (loop.ts createReconciler, 30 s): the JS stack and the native
 * one, so the journal says where it is stuck.
 */
export function dumpStacks(log: (msg: string) => void): void {
  try {
    const report = process.report?.getReport() as unknown as {
      javascriptStack?: { message?: string; stack?: string[] };
      nativeStack?: { symbol?: string }[];
    };
    log(
      [
        'reconcile pass running past 30 s; stacks follow',
        `javascript: ${report?.javascriptStack?.message ?? ''}`,
        ...(report?.javascriptStack?.stack ?? []).map((l) => `  ${l}`),
        'native:',
        ...(report?.nativeStack ?? []).map((f) => `  ${f.symbol ?? '?'}`),
      ].join('\n'),
    );
  } catch (e) {
    log(`reconcile pass running past 30 s; no stack report: ${(e as Error).message}`);
  }
}
