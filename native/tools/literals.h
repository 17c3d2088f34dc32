#pragma once
#include <napi.h>

namespace leash {
/**
 * createLiteralFinder(literals: string[]) -> has(buf: Buffer) -> 1 | 0: whether buf holds any of
 * the literals, ASCII letters compared without case. The gate's "may this answer hold a secret"
 * pre-check (src/engine/inspect.ts SECRET_LITERALS), done in one pass over the bytes.
 */
Napi::Value CreateLiteralFinder(const Napi::CallbackInfo& info);
}  // namespace leash
