# MntNvidiaWheels: MNT_NVIDIA_WHEEL_DIRS, the site-packages/nvidia/<pkg> roots of the NVIDIA wheels
# of the python3 on PATH (PyTorch's nvidia-cudnn, -nccl, -cublas; empty without python3 or
# them), found once and cached. Used by FindCUDNN, FindNCCL and FindCUBLAS.
if(NOT DEFINED MNT_NVIDIA_WHEEL_DIRS)
  find_program(MNT_PYTHON3 NAMES python3 DOC "python3 whose NVIDIA wheels (nvidia/cudnn, nvidia/nccl) may serve")
  mark_as_advanced(MNT_PYTHON3)
  set(_mnt_nv "")
  if(MNT_PYTHON3)
    execute_process(COMMAND "${MNT_PYTHON3}" -c
      "import nvidia, os; print(';'.join(sorted({os.path.realpath(p) for p in nvidia.__path__})))"
      OUTPUT_VARIABLE _mnt_nv RESULT_VARIABLE _mnt_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 60)
    if(NOT _mnt_rc EQUAL 0)
      set(_mnt_nv "")
    endif()
  endif()
  set(MNT_NVIDIA_WHEEL_DIRS "${_mnt_nv}" CACHE INTERNAL "site-packages/nvidia directories of python3's wheels")
endif()

# mnt_find_nvidia(VAR HEADER WHEEL LIB_NAMES...): VAR_INCLUDE_DIR (HEADER under $ENV{VAR_HOME},
# $ENV{CUDA_HOME}, /usr/local/cuda, the system paths, then the nvidia/WHEEL, nvidia/cu13 and
# nvidia/cu12 wheel folders) and VAR_LIBRARY (one of LIB_NAMES, from the header's own root first:
# no header of one install with another's library; wheels carry only versioned names).
macro(mnt_find_nvidia var header wheel)
  set(_mnt_roots $ENV{${var}_HOME} $ENV{CUDA_HOME} /usr/local/cuda)
  set(_mnt_wheel_roots "")
  foreach(_d IN LISTS MNT_NVIDIA_WHEEL_DIRS)
    list(APPEND _mnt_wheel_roots "${_d}/${wheel}" "${_d}/cu13" "${_d}/cu12")
  endforeach()
  find_path(${var}_INCLUDE_DIR ${header} HINTS ${_mnt_roots} PATH_SUFFIXES include)
  if(NOT ${var}_INCLUDE_DIR)
    find_path(${var}_INCLUDE_DIR ${header} PATHS ${_mnt_wheel_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
  endif()
  set(_mnt_lib_hints "")
  if(${var}_INCLUDE_DIR)
    get_filename_component(_mnt_lib_hints "${${var}_INCLUDE_DIR}/.." ABSOLUTE)
  endif()
  find_library(${var}_LIBRARY NAMES ${ARGN} NAMES_PER_DIR
    HINTS ${_mnt_lib_hints} ${_mnt_roots} ${_mnt_wheel_roots} PATH_SUFFIXES lib64 lib)
endmacro()
