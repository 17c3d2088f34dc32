#pragma once
#include <napi.h>

namespace leash {
/**
 * createGateJudge(config) -> { judge(line, start, end): number, add(name, tool): number }: the MCP
 * gate's native judge of a plain tools/call (native/tools/gatejudge.cc, src/tools/judge/native.ts).
 * `add` registers a tool name JavaScript judged allowed by name, with its argument rules in native
 * form; `judge` reads the params span of a line the JSON scanner accepted and answers the tool's
 * index when the call is certainly allowed (name registered, arguments admitted, no detector's need
 * met), else -1: JavaScript then judges the call as before.
 */
Napi::Value CreateGateJudge(const Napi::CallbackInfo& info);
}  // namespace leash
