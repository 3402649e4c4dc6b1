#include "server/engine/thread_name.h"

#include <pthread.h>

namespace performer::server {

void NameThisThread(const std::string& name) {
  // pthread_setname_np fails (ERANGE) on more than 15 characters.
  (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

std::string ThisThreadName() {
  char name[16] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return "";
  return name;
}

}  // namespace performer::server
