# The CUDA build's package, fp8studio-cuda (scripts/build-cuda.sh: the official LibTorch 2.x inside
# PyPI's torch wheel). It bundles the wheel's LibTorch and the NVIDIA CUDA libraries the wheel was
# built with, so that a machine needs only the NVIDIA driver (README, "GPU package", says why bundled
# rather than downloaded on first run). They keep the wheel's layout under /usr/lib/fp8studio-cuda:
#   torch/lib/    libtorch*, libc10*, and the libgomp/libgfortran the wheel carries
#   nvidia/*/lib/ cuBLAS, cuDNN, NCCL, cuSPARSELt, NVSHMEM, the CUDA runtime, NVRTC, ...
# so that libtorch_cuda's own RPATH ($ORIGIN/../../nvidia/<x>/lib) still finds them. Left out: the
# Python bindings (libtorch_python, libshm), headers, static archives, Triton (Python-only JIT), and
# the multi-node plugins a desktop never loads, which need MPI, UCX or RDMA libraries: NVSHMEM's
# bootstrap and transport plugins, cuFile's RDMA.
# Included from packaging/CMakeLists.txt before CPack, only when LibTorch was built with CUDA.

set(FP8S_BUNDLE lib/fp8studio-cuda)
get_filename_component(FP8S_WHEEL_SITE "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
if(NOT EXISTS "${TORCH_INSTALL_PREFIX}/lib/libtorch_cuda.so")
  message(FATAL_ERROR "fp8studio-cuda: ${TORCH_INSTALL_PREFIX}/lib has no libtorch_cuda.so; "
                      "the CUDA package bundles the LibTorch of PyPI's torch wheel (scripts/build-cuda.sh)")
endif()

set(FP8S_BUNDLE_EXCLUDE "(libtorch_python[.]so|libshm.*|nvshmem_bootstrap_.*|nvshmem_transport_.*|libcufile_rdma.*)")
install(DIRECTORY "${TORCH_INSTALL_PREFIX}/lib/" DESTINATION ${FP8S_BUNDLE}/torch/lib
        USE_SOURCE_PERMISSIONS FILES_MATCHING PATTERN "*.so*"
        REGEX "/${FP8S_BUNDLE_EXCLUDE}$" EXCLUDE)
install(DIRECTORY "${FP8S_WHEEL_SITE}/nvidia/" DESTINATION ${FP8S_BUNDLE}/nvidia
        USE_SOURCE_PERMISSIONS FILES_MATCHING PATTERN "*.so*"
        PATTERN "include" EXCLUDE PATTERN "cccl" EXCLUDE PATTERN "bin" EXCLUDE PATTERN "__pycache__" EXCLUDE
        REGEX "/${FP8S_BUNDLE_EXCLUDE}$" EXCLUDE)
# their licences (NVIDIA's allow redistribution with an application)
file(GLOB FP8S_WHEEL_LICENSES LIST_DIRECTORIES true
     "${FP8S_WHEEL_SITE}/torch-*.dist-info/licenses" "${FP8S_WHEEL_SITE}/nvidia_*.dist-info/licenses")
foreach(dir ${FP8S_WHEEL_LICENSES})
  get_filename_component(dist "${dir}" DIRECTORY)
  get_filename_component(dist "${dist}" NAME)
  string(REGEX REPLACE "\\.dist-info$" "" dist "${dist}")
  install(DIRECTORY "${dir}/" DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/fp8studio/third-party/${dist})
endforeach()

# The programs find LibTorch in the bundle, and the CUDA libraries they link themselves (the CUDA
# runtime, NVRTC) in the same folders libtorch_cuda uses; never a toolkit path.
set(rpath "$ORIGIN/../${FP8S_BUNDLE}/torch/lib")
file(GLOB FP8S_WHEEL_NVIDIA_LIBS LIST_DIRECTORIES true RELATIVE "${FP8S_WHEEL_SITE}" "${FP8S_WHEEL_SITE}/nvidia/*/lib")
foreach(dir ${FP8S_WHEEL_NVIDIA_LIBS})
  list(APPEND rpath "$ORIGIN/../${FP8S_BUNDLE}/${dir}")
endforeach()
foreach(target fp8studio-cli fp8studio)
  if(TARGET ${target})
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
  endif()
endforeach()

set(CPACK_PACKAGE_NAME "fp8studio-cuda")
string(APPEND CPACK_PACKAGE_DESCRIPTION "

This is the CUDA build: LibTorch ${Torch_VERSION} with CUDA ${FP8S_TORCH_CUDA} (GPU architectures
${FP8S_CUDA_ARCHS}), bundled with the NVIDIA CUDA libraries it was built with; the machine needs
only the NVIDIA driver. Without a GPU it runs on the CPU.")
set(CPACK_GENERATOR "DEB")  # 4 GB of libraries: no tarball
# the same programs and data as the CPU package: one or the other
set(CPACK_DEBIAN_PACKAGE_CONFLICTS "fp8studio")
set(CPACK_DEBIAN_PACKAGE_REPLACES "fp8studio")
set(CPACK_DEBIAN_PACKAGE_PROVIDES "fp8studio")
# the bundled LibTorch does its own BLAS (MKL inside libtorch_cpu): no OpenBLAS. The libraries'
# dependencies are added at packing time by cuda-depends.cmake (CPack's own pass cannot do it).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "qt6-qpa-plugins, libqt6svg6")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(CPACK_PROJECT_CONFIG_FILE "${CMAKE_CURRENT_LIST_DIR}/cuda-depends.cmake")
set(CPACK_FP8S_PROGRAMS_FILE "${CMAKE_BINARY_DIR}/fp8studio-cuda-programs.cmake")
set(programs "$<TARGET_FILE:fp8studio-cli>")
if(TARGET fp8studio)
  string(APPEND programs ";$<TARGET_FILE:fp8studio>")
endif()
file(GENERATE OUTPUT "${CPACK_FP8S_PROGRAMS_FILE}" CONTENT "set(FP8S_PROGRAMS \"${programs}\")\n")
# the folders the bundle's libraries come from: dpkg-shlibdeps' private library folders
set(CPACK_FP8S_LIB_DIRS "${TORCH_INSTALL_PREFIX}/lib")
foreach(dir ${FP8S_WHEEL_NVIDIA_LIBS})
  list(APPEND CPACK_FP8S_LIB_DIRS "${FP8S_WHEEL_SITE}/${dir}")
endforeach()
set(CPACK_FP8S_BUNDLE_EXCLUDE "${FP8S_BUNDLE_EXCLUDE}")
# zstd: seconds on 4 GB where xz takes half an hour (dpkg reads it since Debian 12)
set(CPACK_DEBIAN_COMPRESSION_TYPE "zstd")
set(CPACK_THREADS 0)
