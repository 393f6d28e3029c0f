# FindCUDNN: cuDNN 9 headers and library. Looks in CUDNN_HOME, CUDA_HOME, /usr/local/cuda (the
# CUDA image here), the system paths, then in the nvidia-cudnn wheel of the python3 on PATH
# (PyTorch's: site-packages/nvidia/cudnn/{include,lib}, where the library is only libcudnn.so.9,
# without the unversioned link). Defines CUDNN_FOUND, CUDNN_VERSION and the imported target
# CUDNN::CUDNN.

include(${CMAKE_CURRENT_LIST_DIR}/MntNvidiaWheels.cmake) # MNT_NVIDIA_WHEEL_DIRS
mnt_find_nvidia(CUDNN cudnn.h cudnn cudnn libcudnn.so.9)

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
