# FindCUBLAS: cuBLAS when the CUDA toolkit CMake found has none (CUDA::cublas missing): the
# nvidia-cublas wheel of the python3 on PATH (PyTorch's: site-packages/nvidia/cublas or
# nvidia/cu13, libcublas.so.13 without the unversioned link). Defines CUBLAS_FOUND and, when it
# found one, the imported target CUDA::cublas (the name the toolkit's own would have).
include(${CMAKE_CURRENT_LIST_DIR}/MntNvidiaWheels.cmake) # MNT_NVIDIA_WHEEL_DIRS
set(_cublas_roots "")
foreach(_d IN LISTS MNT_NVIDIA_WHEEL_DIRS)
  list(APPEND _cublas_roots "${_d}/cublas" "${_d}/cu13" "${_d}/cu12")
endforeach()
find_path(CUBLAS_INCLUDE_DIR cublas_v2.h PATHS ${_cublas_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(CUBLAS_LIBRARY NAMES cublas libcublas.so.13 libcublas.so.12 NAMES_PER_DIR PATHS ${_cublas_roots}
  PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
find_library(CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12 NAMES_PER_DIR PATHS ${_cublas_roots}
  PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUBLAS REQUIRED_VARS CUBLAS_LIBRARY CUBLASLT_LIBRARY CUBLAS_INCLUDE_DIR)
if(CUBLAS_FOUND AND NOT TARGET CUDA::cublas)
  add_library(CUDA::cublas UNKNOWN IMPORTED)
  set_target_properties(CUDA::cublas PROPERTIES IMPORTED_LOCATION "${CUBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUBLAS_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES "${CUBLASLT_LIBRARY}")
endif()
mark_as_advanced(CUBLAS_INCLUDE_DIR CUBLAS_LIBRARY CUBLASLT_LIBRARY)
