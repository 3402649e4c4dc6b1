// Which model a recurrent state belongs to: a state moves (export /
// import, the spill folder) only between models with the same fingerprint,
// the model's name and hashes of its configuration and weights.
#pragma once

#include <string>

namespace performer::decoding {

struct ModelFingerprint {
  std::string model;
  std::string config_hash;
  std::string weights_hash;

  bool operator==(const ModelFingerprint& other) const {
    return model == other.model && config_hash == other.config_hash &&
           weights_hash == other.weights_hash;
  }
};

}  // namespace performer::decoding
