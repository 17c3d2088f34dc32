// The watcher holds fewer events than the approvals queue: every event held costs every answer of the fanotify
// group a wake-up of the held process (docs/approvals.md, Load), so its own bound, approvals.max_held_opens, caps
// both the total and the per-subject bound the queue's settings would give it.
import { describe, expect, it } from 'vitest';
import { watcherHoldSettings } from '../../../../src/control/reconcile/surfaces/watcher.js';
import { parseConfig } from '../../../../src/control/config/load.js';

const settings = (approvals: string) =>
  watcherHoldSettings(parseConfig(`user: null\napprovals: ${approvals}\n`, 'test.yaml').config);

describe('the watcher hold bounds', () => {
  it('default to 2 held opens and execs, whatever the queue allows', () => {
    expect(settings('{}')).toEqual({ max: 2, perSubject: 2, filesystemMs: 10_000, commandsMs: 10_000 });
  });

  it('take the lower of the queue bound and max_held_opens, per subject and in total', () => {
    expect(settings('{ max_held_opens: 600 }')).toMatchObject({ max: 600, perSubject: 200 });
    expect(settings('{ max_held_opens: 50, max_pending: 20, max_pending_per_subject: 5 }')).toMatchObject({
      max: 20,
      perSubject: 5,
    });
    expect(settings('{ max_held_opens: 1, deadlines: { filesystem: 3, commands: 4 } }')).toEqual({
      max: 1,
      perSubject: 1,
      filesystemMs: 3000,
      commandsMs: 4000,
    });
  });

  it('refuse a bound of 0, which would turn holding off without saying so', () => {
    let err: unknown = null;
    try {
      settings('{ max_held_opens: 0 }');
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'config_invalid' });
    expect(JSON.stringify((err as { details: unknown }).details)).toMatch(/approvals\.max_held_opens.*at least 1/);
  });
});
