// What an Engine reports as it works, for metrics (server/metrics), without
// the engine knowing of any metrics library. Called on the engine thread:
// implementations must be cheap and must not block.
#pragma once

#include <cstdint>

#include "server/engine/request_stream.h"

namespace performer::server {

struct EngineStepStats {
  int64_t prefills = 0;        // prompt chunks fed (first chunks and Extend chunks)
  double prefill_seconds = 0;  // their total time
  int64_t batch_size = 0;      // rows of the decode step (0: no step ran)
  double decode_seconds = 0;   // the decode step, sampling included
  int64_t tokens = 0;          // tokens emitted in this iteration
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // One loop iteration that did any model work.
  virtual void OnStep(const EngineStepStats& stats) = 0;
  // A token after a request's first: the time since its previous token.
  virtual void OnInterTokenGap(double seconds) = 0;
  // A generation ended (also one that never left the queue, with
  // prefill_seconds < 0).
  virtual void OnFinished(const StreamSummary& summary, double prefill_seconds) = 0;
};

}  // namespace performer::server
