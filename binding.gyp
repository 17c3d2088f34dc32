{
  "target_defaults": {
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions"],
    "cflags": ["-O2", "-fstack-protector-strong", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"],
    "cflags_cc": ["-O2", "-std=c++17", "-fstack-protector-strong", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"],
    "ldflags": ["-Wl,-z,relro", "-Wl,-z,now"],
    "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "_FORTIFY_SOURCE=2", "_GNU_SOURCE"]
  },
  "targets": [
    {
      "target_name": "leash_native",
      "sources": [
        "native/common/module.cc",
        "native/common/register.cc",
        "native/proxy/register.cc",
        "native/watcher/register.cc",
        "native/tools/register.cc",
        "native/common/errors.cc",
        "native/common/jsonline.cc",
        "native/common/sockopt.cc",
        "native/proxy/conntrack.cc",
        "native/proxy/nftread.cc",
        "native/common/notify.cc",
        "native/common/journal.cc",
        "native/proxy/splice.cc",
        "native/proxy/splice_loop.cc",
        "native/proxy/pump.cc",
        "native/proxy/acceptor.cc",
        "native/proxy/acceptor_setup.cc",
        "native/proxy/acceptor_fast.cc",
        "native/proxy/acceptor_lines.cc",
        "native/proxy/fastpath.cc",
        "native/proxy/fastpath_napi.cc",
        "native/proxy/sni.cc",
        "native/proxy/netmatch.cc",
        "native/proxy/netmatch_napi.cc",
        "native/watcher/fsmatch.cc",
        "native/watcher/decisionline.cc",
        "native/watcher/fanotify.cc",
        "native/watcher/fanotify_loop.cc",
        "native/watcher/identity.cc",
        "native/watcher/paths.cc",
        "native/watcher/exec_state.cc",
        "native/watcher/watchdog.cc",
        "native/watcher/takeover.cc",
        "native/watcher/hold.cc",
        "native/watcher/hardlinks.cc",
        "native/tools/jsonscan.cc",
        "native/watcher/mntns.cc",
        "native/common/memory.cc",
        "native/tools/walkpath.cc",
        "native/tools/walkcache.cc",
        "native/tools/literals.cc",
        "native/tools/gatejudge.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "native/common",
        "native/watcher",
        "native/proxy",
        "native/tools"
      ],
      "libraries": ["-lpthread"]
    }
  ]
}
