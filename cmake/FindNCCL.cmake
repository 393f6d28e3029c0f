# FindNCCL: NCCL headers and library. Looks in NCCL_HOME, CUDA_HOME, /usr/local/cuda (the CUDA
# image here), the system paths, then in the nvidia-nccl wheel of the python3 on PATH (PyTorch's:
# site-packages/nvidia/nccl/{include,lib}, where the library is only libnccl.so.2, without the
# unversioned link). Defines NCCL_FOUND, NCCL_VERSION and the imported target NCCL::NCCL.

include(${CMAKE_CURRENT_LIST_DIR}/MntNvidiaWheels.cmake) # MNT_NVIDIA_WHEEL_DIRS
mnt_find_nvidia(NCCL nccl.h nccl nccl libnccl.so.2)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(NCCL_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
