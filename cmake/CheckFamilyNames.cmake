# `cmake -DROOT=<source root> -P CheckFamilyNames.cmake`: fails when code outside the family files
# names a model family (docs/architecture.md, "What a family is"): an identifier in engine/pipeline,
# engine/cli, engine/compare or gui/ that says the name of a family folder (engine/families/NAME/:
# flux, zimage, and each one added), SD1 or SDXL, or a string compared with such a name. Comments,
# help texts and messages may name them; the decisions live in engine/families/.
set(dirs engine/pipeline engine/cli engine/compare gui)
set(bad 0)
# every family folder's name (4 letters or more; sd/ is matched by its own names below), in any case
file(GLOB family_dirs LIST_DIRECTORIES true ${ROOT}/engine/families/*)
set(folder_names "")
foreach(d ${family_dirs})
  if(IS_DIRECTORY ${d})
    get_filename_component(n ${d} NAME)
    string(LENGTH "${n}" len)
    if(len GREATER 3)
      string(TOUPPER "${n}" upper)
      string(SUBSTRING "${n}" 0 1 first)
      string(TOUPPER "${first}" first)
      string(SUBSTRING "${n}" 1 -1 rest)
      string(APPEND folder_names "|${n}|${upper}|${first}${rest}")
    endif()
  endif()
endforeach()
foreach(d ${dirs})
  file(GLOB_RECURSE files ${ROOT}/${d}/*.h ${ROOT}/${d}/*.cpp)
  foreach(f ${files})
    file(READ ${f} text)
    # a family's name compared as a string
    string(REGEX MATCHALL "(==|!=)[ \t]*\"[^\"\n]*([Ff]lux|FLUX|SDXL|[Ss][Dd]1|[Ss][Dd]xl)[^\"\n]*\"|\"[^\"\n]*([Ff]lux|FLUX|SDXL|[Ss][Dd]1|[Ss][Dd]xl)[^\"\n]*\"[ \t]*(==|!=)" compares "${text}")
    # then identifiers: string literals (one line each) and // comments removed first
    string(REGEX REPLACE "\"([^\"\\\\\n]|\\\\.)*\"" "\"\"" code "${text}")
    string(REGEX REPLACE "//[^\n]*" "" code "${code}")
    string(REGEX MATCHALL "[A-Za-z0-9_]*([Ff]lux|FLUX|Sdxl|sdxl|SDXL|Sd1|sd1|SD1|Sd[A-Z]|sd_|ZImage|z_image${folder_names})[A-Za-z0-9_]*" names "${code}")
    foreach(hit ${compares} ${names})
      file(RELATIVE_PATH rel ${ROOT} ${f})
      message(SEND_ERROR "${rel}: names a family: ${hit}")
      math(EXPR bad "${bad} + 1")
    endforeach()
  endforeach()
endforeach()
if(bad GREATER 0)
  message(FATAL_ERROR "${bad} family names outside engine/families (move the decision into the family)")
endif()
message(STATUS "no family named in ${dirs} (families: flux, sd, sdxl${folder_names})")
