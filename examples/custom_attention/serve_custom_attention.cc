// performer-serve with the "square" attention registered: model folders
// whose FastTransformersLM config says "attention_type": "square" load and
// decode like any other (same flags as performer-serve).
#include <iostream>

#include "examples/custom_attention/quadratic_attention.h"
#include "server/serve_main.h"

int main(int argc, char** argv) {
  if (absl::Status s = performer::examples::RegisterQuadraticAttentionGlobally(); !s.ok()) {
    std::cerr << "cannot register the square attention: " << s << "\n";
    return 1;
  }
  return performer::server::ServeMain(argc, argv);
}
