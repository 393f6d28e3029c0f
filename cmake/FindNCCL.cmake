# FindNCCL: NCCL headers and library. Looks in NCCL_HOME, CUDA_HOME, /usr/local/cuda (the CUDA
# image here), the system paths, then in the nvidia-nccl wheel of the python3 on PATH (PyTorch's:
# site-packages/nvidia/nccl/{include,lib}, where the library is only libnccl.so.2, without the
# unversioned link). Defines NCCL_FOUND, NCCL_VERSION and the imported target NCCL::NCCL.

include(${CMAKE_CURRENT_LIST_DIR}/MntNvidiaWheels.cmake) # MNT_NVIDIA_WHEEL_DIRS
set(_nccl_roots $ENV{NCCL_HOME} $ENV{CUDA_HOME} /usr/local/cuda)
set(_nccl_wheel_roots "")
foreach(_d IN LISTS MNT_NVIDIA_WHEEL_DIRS)
  list(APPEND _nccl_wheel_roots "${_d}/nccl" "${_d}/cu13" "${_d}/cu12")
endforeach()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_roots} PATH_SUFFIXES include)
if(NOT NCCL_INCLUDE_DIR)
  find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${_nccl_wheel_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
endif()
# the library from the header's own root first
set(_nccl_lib_hints "")
if(NCCL_INCLUDE_DIR)
  get_filename_component(_nccl_lib_hints "${NCCL_INCLUDE_DIR}/.." ABSOLUTE)
endif()
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
  HINTS ${_nccl_lib_hints} ${_nccl_roots} ${_nccl_wheel_roots} PATH_SUFFIXES lib64 lib)

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
