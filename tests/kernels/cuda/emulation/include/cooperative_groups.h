// The thread-block cluster of cooperative_groups on the host
// (tests/kernels/cuda/emulation/cuda_emulation.h runs a cluster's blocks at
// once).
#pragma once

#include "tests/kernels/cuda/emulation/cuda_emulation.h"

namespace cooperative_groups {

class cluster_group {
 public:
  unsigned block_rank() const {
    return static_cast<unsigned>(::performer::cuda_emulation::Current().cluster_rank);
  }
  unsigned num_blocks() const { return ::performer::cuda_emulation::ClusterSize(); }
  void sync() const { ::performer::cuda_emulation::SyncCluster(); }
  template <typename T>
  T* map_shared_rank(T* address, unsigned rank) const {
    return static_cast<T*>(::performer::cuda_emulation::MapSharedRank(
        const_cast<void*>(static_cast<const void*>(address)), rank));
  }
};

inline cluster_group this_cluster() { return {}; }

}  // namespace cooperative_groups
