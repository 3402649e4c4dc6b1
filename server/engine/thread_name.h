// Names the calling thread, as `top -H`, `perf` and /proc/<pid>/task/*/comm
// show it: the server's own threads say what they are (compute, write,
// engine, embedder) beside gRPC's. Linux keeps 15 characters; longer names
// are cut.
#pragma once

#include <string>

namespace performer::server {

void NameThisThread(const std::string& name);

// The calling thread's name ("" where it cannot be read).
std::string ThisThreadName();

}  // namespace performer::server
