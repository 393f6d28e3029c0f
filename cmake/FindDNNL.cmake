# FindDNNL: oneDNN (2.x) headers and library, found directly (DNNL_ROOT or the system paths).
# Defines DNNL_FOUND, DNNL_VERSION and the imported target DNNL::dnnl.
# Why not oneDNN's own CMake config: Debian's dnnl-config.cmake requires OpenCL (headers and the
# ICD loader, ocl-icd-opencl-dev, only a Recommends of libdnnl-dev), so a fresh machine installed
# with --no-install-recommends failed at configure. mntrain uses the C API on the CPU engine
# only, which needs nothing but dnnl.h and libdnnl.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h HINTS ENV DNNL_ROOT ENV DNNLROOT PATH_SUFFIXES include)
find_library(DNNL_LIBRARY dnnl HINTS ENV DNNL_ROOT ENV DNNLROOT PATH_SUFFIXES lib lib64)
set(_dnnl_vh "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
if(DNNL_INCLUDE_DIR AND NOT EXISTS "${_dnnl_vh}")
  set(_dnnl_vh "${DNNL_INCLUDE_DIR}/dnnl_version.h")
endif()
if(DNNL_INCLUDE_DIR AND EXISTS "${_dnnl_vh}")
  file(STRINGS "${_dnnl_vh}" _v REGEX "^#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*DNNL_VERSION_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(DNNL_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)
