# FindCUDNN: cuDNN 9 headers and library. Looks in CUDNN_HOME, CUDA_HOME, /usr/local/cuda (the
# CUDA image here), the system paths, then in the nvidia-cudnn wheel of the python3 on PATH
# (PyTorch's: site-packages/nvidia/cudnn/{include,lib}, where the library is only libcudnn.so.9,
# without the unversioned link). Defines CUDNN_FOUND, CUDNN_VERSION and the imported target
# CUDNN::CUDNN.

include(${CMAKE_CURRENT_LIST_DIR}/MntNvidiaWheels.cmake) # MNT_NVIDIA_WHEEL_DIRS
set(_cudnn_roots $ENV{CUDNN_HOME} $ENV{CUDA_HOME} /usr/local/cuda)
set(_cudnn_wheel_roots "")
foreach(_d IN LISTS MNT_NVIDIA_WHEEL_DIRS)
  list(APPEND _cudnn_wheel_roots "${_d}/cudnn" "${_d}/cu13" "${_d}/cu12")
endforeach()

find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_roots} PATH_SUFFIXES include)
if(NOT CUDNN_INCLUDE_DIR)
  find_path(CUDNN_INCLUDE_DIR cudnn.h PATHS ${_cudnn_wheel_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
endif()
# the library from the headers' own root first (no cudnn.h of one install with another's library)
set(_cudnn_lib_hints "")
if(CUDNN_INCLUDE_DIR)
  get_filename_component(_cudnn_lib_hints "${CUDNN_INCLUDE_DIR}/.." ABSOLUTE)
endif()
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
  HINTS ${_cudnn_lib_hints} ${_cudnn_roots} ${_cudnn_wheel_roots} PATH_SUFFIXES lib64 lib)

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _v REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_v}")
  set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
