#pragma once
#include <napi.h>

namespace leash {
/** createJsonScanner(out) -> scan(line): 1 when the line is certainly valid and canonical for the MCP gate. */
Napi::Value CreateJsonScanner(const Napi::CallbackInfo& info);
}  // namespace leash
