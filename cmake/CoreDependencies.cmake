# The packages fp8s_core (the LibTorch-free engine sources) needs; shared by the main build and the
# standalone fuzz build (tests/fuzz).
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PNG REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(UTF8PROC IMPORTED_TARGET libutf8proc)
endif()
if(NOT TARGET PkgConfig::UTF8PROC)  # no pkg-config (a bare GPU machine with carried libraries)
  find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
  find_library(UTF8PROC_LIBRARY utf8proc REQUIRED)
  add_library(PkgConfig::UTF8PROC UNKNOWN IMPORTED)
  set_target_properties(PkgConfig::UTF8PROC PROPERTIES IMPORTED_LOCATION "${UTF8PROC_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${UTF8PROC_INCLUDE_DIR}")
endif()
