/* env.h — the environment variables mntrain reads: one table, one parser, one behaviour.
 * defines: MNT_ENV_VARS (the table) and its typed getters mnt_env_<id> (mnt_env_comm_timeout,
 *          mnt_env_log_level, ...), mnt_env_check (every variable at once; main calls it before
 *          anything else), mnt_env_seconds/bytes/string (by name, for tests),
 *          mnt_env_print_help (the documented list, as `mntrain --help` shows it).
 * A variable that is set to a value outside its type or range is an error that names it
 * (MNT_EARG), never a silent fallback to the default; unset or empty means the default. */
#ifndef MNT_ENV_H
#define MNT_ENV_H

#include <stddef.h>
#include <stdio.h>

/* The table: getter id, name, kind, default (as a user writes it), min, max (SECONDS, BYTES:
 * inclusive), power of two (BYTES), the words a CHOICE takes ("a|b|c", any case), help. Each row gives a typed getter mnt_env_<id>: a typo in a
 * variable's name is a compile error, not a run-time one. */
#define MNT_ENV_VARS(X)                                                                                         \
  X(comm_timeout, "MNT_COMM_TIMEOUT", SECONDS, "600", 1, 7 * 86400, 0, 0,                                           \
    "seconds a collective or set-up may wait without progress before the job is aborted; a warning names "      \
    "the rank that holds everyone up after min(30 s, half of it)")                                              \
  X(comm_iface, "MNT_COMM_IFACE", STRING, "", 0, 0, 0, 0,                                                          \
    "network interface (name or prefix, e.g. ib0 or eth) for TCP between nodes (default: the first "            \
    "non-loopback IPv4 interface that is up)")                                                                  \
  X(log_level, "MNT_LOG_LEVEL", LEVEL, "info", 0, 0, 0, 0, "error, warn, info or debug")                           \
  X(shm_fifo_bytes, "MNT_SHM_FIFO_BYTES", BYTES, "4M", 4096, 1u << 30, 1, 0,                                       \
    "shared-memory FIFO per link, a power of two")                                                              \
  X(tcp_buf, "MNT_TCP_BUF", BYTES, "0", 0, 1u << 30, 0, 0,                                                         \
    "SO_SNDBUF/SO_RCVBUF of the TCP links in bytes (0: the kernel's autotuning)")                               \
  X(progress_interval, "MNT_PROGRESS_INTERVAL", SECONDS, "30", 0.01, 86400, 0, 0,                                  \
    "seconds between progress lines of long commands (convert, inspect --verify) when stderr is not a "         \
    "terminal")                                                                                                 \
  X(decode_max_bytes, "MNT_DECODE_MAX_BYTES", BYTES, "512M", 1u << 20, 1ull << 40, 0, 0,                          \
    "memory the decoding of one image may take in convert imagenet, judged from its header before decoding: "  \
    "the decoded pixels, and for a progressive (or multi-scan) JPEG every DCT coefficient, 2 bytes per sample " \
    "of each component (width x height x 6 bytes at 4:4:4, x 3 at 4:2:0); an image that needs more is "       \
    "skipped, named and counted. Each decoding thread may take this much")                                      \
  X(lock_stale_s, "MNT_LOCK_STALE_S", SECONDS, "300", 1, 7 * 86400, 0, 0,                                          \
    "a run directory's lock (mntrain.lock) whose heartbeat is older than this, and whose holder Slurm cannot "  \
    "account for, is taken over (the holder refreshes it every tenth of this, at most every 30 s)")             \
  X(cuda_module, "MNT_CUDA_MODULE", STRING, "", 0, 0, 0, 0,                                                        \
    "path of the CUDA module that --device cuda and --comm nccl load (default: lib/mntrain/mntrain-cuda.so "    \
    "beside the binary's bin/, or lib/mntrain/ in its build directory)")                                        \
  X(simd, "MNT_SIMD", CHOICE, "auto", 0, 0, 0, "auto|sse2|avx2|avx512",                                                                    \
    "vector instructions of mntrain's own loops (loader, casts, optimizer): sse2, avx2 or avx512, at most "     \
    "what the CPU runs; auto: the best it runs")                                                                       \
  X(cpu_layout, "MNT_CPU_LAYOUT", CHOICE, "auto", 0, 0, 0, "auto|blocked|nhwc",                                  \
    "--device cpu: the layout of activations whose channels fill oneDNN's vector block: blocked (nChw16c "     \
    "on AVX-512, nChw8c on AVX2), nhwc, or auto: the one oneDNN's own convolutions choose for the precision "   \
    "(fp32: blocked; bf16: nhwc where oneDNN's AMX kernels want it)")                                                        \
  X(cpu_bind, "MNT_CPU_BIND", CHOICE, "auto", 0, 0, 0, "auto|none",                                              \
    "auto: the ranks of a node that Slurm did not bind each take their own share of its CPUs (and as many "     \
    "compute threads by default); none: leave the CPUs as Slurm set them")                                      \
  X(trace, "MNT_TRACE", STRING, "", 0, 0, 0, 0,                                                                   \
    "directory of mntrain train's timeline when --trace is not given (each rank's spans of --trace-steps)")    \
  X(cudnn_algo, "MNT_CUDNN_ALGO", CHOICE, "deterministic", 0, 0, 0, "deterministic|heuristic|timed",               \
    "how --device cuda picks each convolution's algorithms: deterministic (cuDNN's heuristic ranking, "         \
    "deterministic ones first: every rerun runs the same ones), heuristic (cuDNN's first choice, "              \
    "deterministic or not) or timed (each run once on the layer's shapes at start-up, the fastest "             \
    "deterministic one; all ranks run rank 0's choice; a rerun may choose otherwise)")                       \
  X(copy_overlap, "MNT_COPY_OVERLAP", CHOICE, "on", 0, 0, 0, "on|off",                                              \
    "--device cuda: the next batch's pixels, boxes and labels go up to the GPU on a copy stream while the "     \
    "current batch trains; off: each batch goes up at the start of its own step (the same results, no "         \
    "overlap)")                                                                                                 \
  X(on_rank_loss, "MNT_ON_RANK_LOSS", CHOICE, "abort", 0, 0, 0, "abort|shrink",                                  \
    "mntrain train's --on-rank-loss when the flag is not given: abort (a lost rank takes the job down) or "    \
    "shrink (the survivors go on without it)")                                                                  \
  X(stem_pad, "MNT_STEM_PAD", CHOICE, "on", 0, 0, 0, "on|off",                                                      \
    "--device cuda --precision bf16: the first convolution's 3 input channels are padded with a zero fourth "  \
    "for cuDNN (tensor-core NHWC kernels want a multiple of 4, as NVIDIA's ResNet-50 recipes pad); off: "       \
    "cuDNN gets the 3 channels")

/* the typed getters: SECONDS and BYTES return MNT_OK or MNT_EARG (logged, naming the variable);
 * STRING and CHOICE return the value or NULL when unset or empty. What a CHOICE's word means is
 * its user's (MNT_SIMD: src/simd.c, which also refuses a variant this CPU cannot run). */
#define MNT_ENV_GETTER_SECONDS(id) int mnt_env_##id(double *out);
#define MNT_ENV_GETTER_BYTES(id) int mnt_env_##id(size_t *out);
#define MNT_ENV_GETTER_STRING(id) const char *mnt_env_##id(void);
#define MNT_ENV_GETTER_CHOICE(id) const char *mnt_env_##id(void);
#define MNT_ENV_GETTER_LEVEL(id) int mnt_env_##id(int *out);
#define MNT_ENV_DECLARE(id, name, kind, ...) MNT_ENV_GETTER_##kind(id)
MNT_ENV_VARS(MNT_ENV_DECLARE)
#undef MNT_ENV_DECLARE

/* Parse every variable of the table; log each bad one. MNT_OK or MNT_EARG. */
int mnt_env_check(void);
/* By name, for the table's own tests (code uses the typed getters above): seconds (a positive
 * decimal number), bytes ("4096", "4M"), the value or NULL. */
int mnt_env_seconds(const char *name, double *out);
int mnt_env_bytes(const char *name, size_t *out);
const char *mnt_env_string(const char *name);
/* (mnt_env_log_level, declared above: MNT_LOG_ERROR .. MNT_LOG_DEBUG, silent: the logger cannot
 * log its own configuration error; mnt_env_check reports it) */
void mnt_env_print_help(FILE *f);

#endif
