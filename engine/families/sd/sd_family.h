// The Stable Diffusion family's registration (pipeline/family_registry.cpp).
#pragma once

#include "pipeline/family.h"

namespace fp8s {
FamilyEntry sd_family_entry();
// The hooks of the CLI's tools (sd_tools.cpp): probe roles, synthetic writers, `--weights auto`
// and the estimate before load.
FamilyTools sd_tools();
}  // namespace fp8s
