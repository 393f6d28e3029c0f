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
