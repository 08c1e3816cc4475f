// Intra-op thread count: LibTorch's default here is one thread (cpuinfo sees one physical core on
// these VMs), so front ends call init_threads() once at start-up.
#pragma once

namespace fp8s {

// Uses `requested` threads when > 0, else $OMP_NUM_THREADS when set, else every logical CPU.
// Returns the count in effect.
int init_threads(int requested = 0);

}  // namespace fp8s
