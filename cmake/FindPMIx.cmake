# FindPMIx: OpenPMIx client library through pkg-config 'pmix' (Debian libpmix-dev).
# Defines PMIx_FOUND and the imported target PMIx::PMIx.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_PMIX QUIET pmix)
endif()
find_path(PMIX_INCLUDE_DIR pmix.h HINTS ${PC_PMIX_INCLUDE_DIRS} ENV PMIX_HOME PATH_SUFFIXES include)
find_library(PMIX_LIBRARY pmix HINTS ${PC_PMIX_LIBRARY_DIRS} ENV PMIX_HOME PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PMIx REQUIRED_VARS PMIX_LIBRARY PMIX_INCLUDE_DIR
  VERSION_VAR PC_PMIX_VERSION)
if(PMIx_FOUND AND NOT TARGET PMIx::PMIx)
  add_library(PMIx::PMIx UNKNOWN IMPORTED)
  set_target_properties(PMIx::PMIx PROPERTIES IMPORTED_LOCATION "${PMIX_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${PMIX_INCLUDE_DIR}")
  get_filename_component(_pmix_libdir "${PMIX_LIBRARY}" DIRECTORY)
  set_property(TARGET PMIx::PMIx PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_pmix_libdir}")
endif()
mark_as_advanced(PMIX_INCLUDE_DIR PMIX_LIBRARY)
