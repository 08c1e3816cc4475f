// The Stable Diffusion family's registration (families/registry.cpp).
#pragma once

#include "families/family.h"

namespace fp8s {
FamilyEntry sd_family_entry();
}  // namespace fp8s
