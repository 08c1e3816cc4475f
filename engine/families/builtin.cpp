// The families built into the engine (pipeline/family.h, builtin_families): one line per family.
// The SD family, which detects every checkpoint and names what it cannot run, comes first and so is
// asked last.
#include "families/flux/flux_family.h"
#include "families/flux2/flux2_family.h"
#include "families/qwenimage/qwenimage_family.h"
#include "families/sd/sd_family.h"
#include "families/zimage/zimage_family.h"
#include "pipeline/family.h"

namespace fp8s {

std::vector<FamilyEntry> builtin_families() { return {sd_family_entry(), flux_family_entry(), zimage_family_entry(), flux2_family_entry(),
                                                          qwenimage_family_entry()}; }

}  // namespace fp8s
