// Raises every explicitly requested thread stack size to at least 1 MiB.
//
// civetweb (prometheus-cpp's HTTP exposer) starts its threads with a small
// fixed stack size; glibc places the static TLS of every loaded library on
// each thread's stack, and with LibTorch loaded that no longer fits, so
// pthread_create fails and the exposer reports "Cannot create threads". The
// executable's definition interposes libc's for every shared library.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attr, std::max<size_t>(size, size_t{1} << 20));
}
