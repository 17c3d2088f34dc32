// The fanotify watcher: a permission-event read loop on a native thread that never
// waits for JavaScript, a watchdog thread, and a bounded record queue to JS.
#pragma once
#include <napi.h>

namespace leash {

/** Registers the Watcher class on `exports` (exports.Watcher). */
void InitWatcher(Napi::Env env, Napi::Object exports);

}  // namespace leash
