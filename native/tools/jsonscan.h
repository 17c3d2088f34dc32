#pragma once
#include <napi.h>

namespace leash {
/** createJsonScanner(out) -> scan(line): 1 when the line is certainly valid and canonical for the MCP gate. */
Napi::Value CreateJsonScanner(const Napi::CallbackInfo& info);
/** createAnswerReader(out, literals) -> read(chunk, at): the plain answers at the start of a chunk (jsonscan.cc). */
Napi::Value CreateAnswerReader(const Napi::CallbackInfo& info);
/**
 * The (chunk: Buffer, at: number) of a chunk reader's call: false when they are not (a TypeError thrown, naming
 * `usage`); *at == SIZE_MAX when `at` is outside the chunk.
 */
bool ChunkArgs(const Napi::CallbackInfo& info, const char* usage, const uint8_t** b, size_t* n, size_t* at);
}  // namespace leash
