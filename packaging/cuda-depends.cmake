# CPACK_PROJECT_CONFIG_FILE of the CUDA package (packaging/cuda-bundle.cmake): its Depends line.
# CPack's own dpkg-shlibdeps pass reads every ELF file in the package and stops at the first library
# no Debian package carries, and the bundle has some that only the NVIDIA driver brings (libcuda.so.1,
# loaded by libcaffe2_nvrtc). So the dependencies are found here instead: dpkg-shlibdeps over the two
# programs and every bundled library but that one, with the bundle's folders as private library
# folders; the libraries it finds there are the package's own, and what remains are Debian's (Qt,
# spdlog, libpng, libquadmath for the wheel's libgfortran, ...).
if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
include("${CPACK_FP8S_PROGRAMS_FILE}")  # FP8S_PROGRAMS: the built fp8studio-cli and fp8studio
find_program(FP8S_SHLIBDEPS dpkg-shlibdeps)
if(NOT FP8S_SHLIBDEPS)
  message(FATAL_ERROR "fp8studio-cuda: dpkg-shlibdeps not found; install dpkg-dev (scripts/install-deps.sh)")
endif()
set(objects ${FP8S_PROGRAMS})
foreach(dir ${CPACK_FP8S_LIB_DIRS})
  file(GLOB libs LIST_DIRECTORIES false "${dir}/*.so*")
  foreach(lib ${libs})
    get_filename_component(name "${lib}" NAME)
    if(NOT IS_SYMLINK "${lib}" AND NOT name MATCHES "^${CPACK_FP8S_BUNDLE_EXCLUDE}$|^libcaffe2_nvrtc")
      list(APPEND objects "${lib}")
    endif()
  endforeach()
endforeach()
set(work "${CPACK_TOPLEVEL_DIRECTORY}/fp8s-shlibdeps")
file(MAKE_DIRECTORY "${work}/debian")
file(WRITE "${work}/debian/control" "")
list(TRANSFORM CPACK_FP8S_LIB_DIRS PREPEND "-l" OUTPUT_VARIABLE private_dirs)
execute_process(COMMAND ${FP8S_SHLIBDEPS} ${private_dirs} --ignore-missing-info -O ${objects}
                WORKING_DIRECTORY "${work}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
file(REMOVE_RECURSE "${work}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "shlibs:Depends=")
  string(REGEX MATCHALL "dpkg-shlibdeps: error: [^\n]*" errors "${err}")
  message(FATAL_ERROR "fp8studio-cuda: dpkg-shlibdeps failed: ${errors}")
endif()
string(REGEX REPLACE "^.*shlibs:Depends=" "" depends "${out}")
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${depends}, ${CPACK_DEBIAN_PACKAGE_DEPENDS}")
message(STATUS "fp8studio-cuda: Depends: ${CPACK_DEBIAN_PACKAGE_DEPENDS}")
