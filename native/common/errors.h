// Errors cross into JavaScript like Node's own fs errors: `code` is the errno
// name and `syscall` the call that failed, so callers branch on err.code.
#pragma once
#include <napi.h>

namespace leash {

/** Name of an errno value ("EPERM"), or "E<number>" when unknown. */
const char* ErrnoName(int err);

/** Builds a JS Error with message "<syscall>: <strerror>", code and syscall set. */
Napi::Error ErrnoError(Napi::Env env, int err, const char* syscall);

/** Throws a TypeError with a usage string; returns undefined for the caller to return. */
Napi::Value Usage(Napi::Env env, const char* usage);

}  // namespace leash
