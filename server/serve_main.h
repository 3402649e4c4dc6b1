// The performer-serve program as a function, so that a binary can prepare
// the process before serving: a user who registers an attention of their
// own in the library's registries (examples/custom_attention) calls
// ServeMain from their main after registering, and their models load.
// Parses the flags (docs/serving.md), serves until SIGTERM or SIGINT, and
// returns the exit status.
#pragma once

namespace performer::server {

int ServeMain(int argc, char** argv);

}  // namespace performer::server
