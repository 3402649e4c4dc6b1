#include "tests/testing/remove_tree.h"

#include <ftw.h>

#include <cstdio>

namespace performer::testing {
namespace {

int RemoveEntry(const char* path, const struct stat* /*info*/, int /*type*/, struct FTW* /*ftw*/) {
  std::remove(path);  // files, links and (emptied, depth-first) folders
  return 0;
}

}  // namespace

void RemoveTree(const std::filesystem::path& path) {
  // Depth-first, without following links; a missing path is not an error.
  nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace performer::testing
