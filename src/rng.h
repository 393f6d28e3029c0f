/* rng.h — splitmix64 (Steele, Lea, Flood 2014; Vigna's public-domain splitmix64.c), the generator
 * behind mntrain's reproducible streams: the weights' initialisation (model/resnet.c) and the data
 * order and augmentation (io/data/dataset.c's mnt_mix). Changing a constant here changes every run.
 * defines: MNT_SPLITMIX64_GAMMA, mnt_splitmix64_mix (the finalizer), mnt_splitmix64_next (one step) */
#ifndef MNT_RNG_H
#define MNT_RNG_H

#include <stdint.h>

/* the state's increment: 2^64 / the golden ratio, odd */
#define MNT_SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

/* the output function: a bijective mix of 64 bits (Stafford's variant 13 of MurmurHash3's fmix64) */
static inline uint64_t mnt_splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* the next number of the stream whose state is *s */
static inline uint64_t mnt_splitmix64_next(uint64_t *s) { return mnt_splitmix64_mix(*s += MNT_SPLITMIX64_GAMMA); }

#endif
