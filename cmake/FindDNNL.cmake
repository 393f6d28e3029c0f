# FindDNNL: oneDNN (2.6, 2.7 or 3.x) for the CPU backend. Defines DNNL_FOUND, DNNL_VERSION, DNNL_FROM
# (where it was found, for configure's message) and the imported target DNNL::dnnl.
# 1. oneDNN's own package config (dnnl-config.cmake, which 3.x and most 2.x installs ship: oneAPI,
#    Spack, a source build, Debian), found under dnnl_DIR, dnnl_ROOT, DNNL_ROOT, CMAKE_PREFIX_PATH or
#    the system prefixes, when it can load here: a config of a build with an OpenCL GPU runtime
#    (Debian's) requires OpenCL headers and the ICD loader (ocl-icd-opencl-dev, only a Recommends of
#    libdnnl-dev: a fresh machine installed with --no-install-recommends has none) and fails
#    configure outright when they are missing; one of a SYCL build wants Intel's compiler. Those
#    are passed over, with a note, for:
# 2. the header and the library themselves (DNNL_ROOT or the system paths): mntrain uses the C API
#    on the CPU engine only, which needs nothing but dnnl.h and libdnnl.
set(DNNL_FROM "")
find_path(DNNL_CONFIG_DIR dnnl-config.cmake HINTS ${dnnl_DIR} ENV dnnl_DIR ENV dnnl_ROOT ENV DNNL_ROOT ENV DNNLROOT
          PATH_SUFFIXES lib/cmake/dnnl lib64/cmake/dnnl lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/dnnl)
if(DNNL_CONFIG_DIR)
  file(STRINGS "${DNNL_CONFIG_DIR}/dnnl-config.cmake" _dnnl_rt REGEX "^set\\(DNNL_(CPU|GPU)_RUNTIME ")
  set(_dnnl_skip "")
  if(_dnnl_rt MATCHES "SYCL|DPCPP")
    set(_dnnl_skip "a SYCL build")
  elseif(_dnnl_rt MATCHES "DNNL_GPU_RUNTIME \"OCL\"")
    find_package(OpenCL QUIET)
    if(NOT OpenCL_FOUND)
      set(_dnnl_skip "it needs OpenCL (ocl-icd-opencl-dev), not installed")
    endif()
  endif()
  if(_dnnl_skip)
    message(STATUS "oneDNN: not using the package config in ${DNNL_CONFIG_DIR} (${_dnnl_skip}): the header and library instead")
  else()
    find_package(dnnl CONFIG QUIET PATHS "${DNNL_CONFIG_DIR}" NO_DEFAULT_PATH)
    if(dnnl_FOUND AND TARGET DNNL::dnnl)
      set(DNNL_VERSION "${dnnl_VERSION}")
      set(DNNL_FROM "package config ${DNNL_CONFIG_DIR}")
    endif()
  endif()
endif()

if(NOT DNNL_FROM)
  find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h HINTS ENV DNNL_ROOT ENV DNNLROOT ENV dnnl_ROOT PATH_SUFFIXES include)
  find_library(DNNL_LIBRARY dnnl HINTS ENV DNNL_ROOT ENV DNNLROOT ENV dnnl_ROOT PATH_SUFFIXES lib lib64)
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
  if(DNNL_LIBRARY AND DNNL_INCLUDE_DIR)
    set(DNNL_FROM "${DNNL_LIBRARY}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_FROM VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
mark_as_advanced(DNNL_CONFIG_DIR DNNL_INCLUDE_DIR DNNL_LIBRARY)
