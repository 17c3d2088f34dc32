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
        "native/module.cc",
        "native/errors.cc",
        "native/sockopt.cc",
        "native/conntrack.cc",
        "native/nftread.cc",
        "native/notify.cc",
        "native/journal.cc",
        "native/splice.cc",
        "native/acceptor.cc",
        "native/fsmatch.cc",
        "native/decisionline.cc",
        "native/fanotify.cc",
        "native/fanotify_loop.cc",
        "native/identity.cc",
        "native/paths.cc",
        "native/exec_state.cc",
        "native/watchdog.cc",
        "native/takeover.cc",
        "native/hold.cc",
        "native/hardlinks.cc",
        "native/jsonscan.cc",
        "native/mntns.cc",
        "native/memory.cc",
        "native/walkpath.cc",
        "native/walkcache.cc",
        "native/literals.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "libraries": ["-lpthread"]
    }
  ]
}
