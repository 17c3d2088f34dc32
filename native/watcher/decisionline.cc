// Decision-log lines formatted natively (see decisionline.h).
#include "decisionline.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "errors.h"

namespace leash {

namespace {

void AppendUint(std::string* out, uint64_t v) {
  char b[24];
  char* e = b + sizeof b;
  char* p = e;
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  out->append(p, static_cast<size_t>(e - p));
}

}  // namespace

void AppendDecisionLine(std::string* out, IsoTime* iso, const DecisionRecord& d) {
  out->append("{\"ts\":\"", 7);
  iso->Append(out, d.tsMs);
  out->append("\",\"ref\":\"", 9);
  out->append(d.ref, 8);
  out->append("\",\"uid\":", 8);
  AppendUint(out, d.uid);
  if (d.exec) {
    out->append(",\"surface\":\"commands\",\"action\":\"");
  } else {
    out->append(",\"surface\":\"filesystem\",\"action\":\"");
  }
  if (d.wouldBlock)
    out->append("would_block", 11);
  else
    out->append(d.allow ? "allow" : "block", 5);
  out->append("\",\"reason\":\"", 12);
  out->append(ReasonName(d.reason));
  out->append(d.exec ? "\",\"subject\":{\"binary\":" : "\",\"subject\":{\"path\":");
  AppendJsonString(out, d.subject.data(), d.subject.size());
  if (d.exec && d.program) {
    out->append(",\"interpreterOf\":", 17);
    AppendJsonString(out, d.program->data(), d.program->size());
  }
  if (d.nlink > 0) {
    out->append(",\"inode\":", 9);
    AppendUint(out, d.inode);
    out->append(",\"nlink\":", 9);
    AppendUint(out, d.nlink);
  }
  out->append("},\"rule\":", 9);
  if (d.rule) {
    AppendJsonString(out, d.rule->data(), d.rule->size());
  } else {
    out->append("null", 4);
  }
  out->append("}\n", 2);
}

Napi::Value FormatDecisionLines(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) {
    return Usage(env, "formatDecisionLines(cases: {ts, uid, exec, allow, reason, subject: Buffer, rule, ref}[])");
  }
  Napi::Array cases = info[0].As<Napi::Array>();
  std::string text;
  IsoTime iso;
  Napi::Array subjects = Napi::Array::New(env, cases.Length());
  Napi::Array rules = Napi::Array::New(env, cases.Length());
  for (uint32_t i = 0; i < cases.Length(); i++) {
    Napi::Value cv = cases.Get(i);
    if (!cv.IsObject()) return Usage(env, "formatDecisionLines: each case is an object");
    Napi::Object c = cv.As<Napi::Object>();
    Napi::Value subj = c.Get("subject");
    Napi::Value refv = c.Get("ref");
    if (!subj.IsBuffer() || !refv.IsString()) return Usage(env, "formatDecisionLines: subject Buffer, ref string");
    auto buf = subj.As<Napi::Buffer<char>>();
    std::string ref = refv.As<Napi::String>().Utf8Value();
    if (ref.size() != 8) return Usage(env, "formatDecisionLines: ref is 8 characters");
    std::string reasonName = c.Get("reason").As<Napi::String>().Utf8Value();
    Reason reason = Reason::kEngineError;
    for (int r = 0; r <= static_cast<int>(Reason::kLast); r++) {
      if (reasonName == ReasonName(static_cast<Reason>(r))) reason = static_cast<Reason>(r);
    }
    Napi::Value rv = c.Get("rule");
    std::string rule;
    bool hasRule = rv.IsString();
    if (hasRule) rule = rv.As<Napi::String>().Utf8Value();
    Napi::Value pv = c.Get("interpreterOf");
    std::string program;
    bool hasProgram = pv.IsBuffer();
    if (hasProgram) program.assign(pv.As<Napi::Buffer<char>>().Data(), pv.As<Napi::Buffer<char>>().Length());
    DecisionRecord d;
    d.tsMs = c.Get("ts").As<Napi::Number>().Int64Value();
    d.ref = ref.data();
    d.uid = c.Get("uid").As<Napi::Number>().Uint32Value();
    d.exec = c.Get("exec").ToBoolean().Value();
    d.allow = c.Get("allow").ToBoolean().Value();
    d.wouldBlock = c.Get("wouldBlock").ToBoolean().Value();
    d.reason = reason;
    d.subject = std::string_view(buf.Data(), buf.Length());
    d.rule = hasRule ? &rule : nullptr;
    d.program = hasProgram ? &program : nullptr;
    Napi::Value iv = c.Get("inode"), nv = c.Get("nlink");
    if (iv.IsNumber() && nv.IsNumber()) {
      d.inode = static_cast<uint64_t>(iv.As<Napi::Number>().Int64Value());
      d.nlink = nv.As<Napi::Number>().Uint32Value();
    }
    AppendDecisionLine(&text, &iso, d);
    subjects.Set(i, Napi::String::New(env, buf.Data(), buf.Length()));
    rules.Set(i, hasRule ? Napi::Value(Napi::String::New(env, rule)) : env.Null());
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("text", Napi::Buffer<char>::Copy(env, text.data(), text.size()));
  out.Set("subjects", subjects);
  out.Set("rules", rules);
  return out;
}

}  // namespace leash
