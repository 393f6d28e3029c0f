/* h5check.c — a shard file's HDF5 structures read and checked without HDF5 before HDF5 opens and
 * reads it (mnt_h5_map_shard, mnt_h5_open_checked; see dataset_internal.h).
 * HDF5 1.10 trusts a file's metadata: a chunk dimension of 0 in a layout message divides by zero
 * inside H5Dopen; an attribute message whose sizes run past its end is copied out of bounds; a chunk
 * whose index entry gives it fewer than 4 bytes sends the Fletcher-32 filter reading far out of
 * bounds; a chunk its index no longer leads to reads back as the fill value (zeros), and a chunk
 * pointer moved onto bytes that are all zero (the unused part of an index node, of the group's heap)
 * reads back as zeros too, whose Fletcher-32 is zero: the checksum covers a chunk's bytes, not where
 * the index says they are. So every structure of the file is read here first, in the formats
 * mntrain's shard writers produce (superblock version 0 or 1 with 8-byte addresses and lengths; the
 * root group's symbol table: its B-tree, symbol nodes and local heap; version 1 object headers with
 * their dataspace, datatype, attribute and version 3 layout messages; version 1 B-tree chunk indexes):
 * each attribute inside its message, each dataset's extent and layout, every entry of every chunk
 * index (each chunk of the extent exactly once, at the size its dimensions give plus the checksum,
 * none skipping its filter), and where every structure and every chunk lies: inside the file, no two
 * overlapping. HDF5 then opens a dataset and its own view is held against that: the exact type, the
 * same extent and chunks, Fletcher-32 as the one filter, and its own lookup finding every chunk (the
 * lookup follows the index's keys, which the walk does not read). What the walk cannot tell: a chunk
 * pointer moved into bytes no structure claims (the padding before a 4 KiB-aligned records dataset)
 * that are zeros.
 * Measured (a format 2 shard of 10,000 16x16x3 images, pages cached, a shared 2-core machine): the
 * map 0.7-0.8 ms, HDF5's lookup of every chunk 2.4-3.1 ms; mnt_dataset_open of the set 5 ms in all,
 * where HDF5 alone opens it in 0.13 ms (it reads the index later, chunk by chunk, as samples are read). */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/data/dataset_internal.h"
#include "src/check.h"
#include "src/log.h"
#include "src/sysmem.h"

enum {
  MAX_RANK = 4,           /* a shard's datasets: images N×H×W×C at most */
  MAX_OBJECTS = 16,       /* objects in a shard's root group (mntrain writes 3 or 6) */
  NAME_MAX_LEN = 63,
  OH_MAX_CHUNKS = 8,      /* object header chunks followed (mntrain's have one) */
  OH_MAX_BYTES = 65536,   /* bytes of one object header chunk, at most */
  BT_MAX_DEPTH = 16,      /* B-tree levels */
  HEAP_MAX_BYTES = 65536, /* the root group's local heap (names), at most */
  MSG_DATASPACE = 0x0001, MSG_DATATYPE = 0x0003, MSG_LAYOUT = 0x0008, MSG_ATTRIBUTE = 0x000c,
  MSG_CONTINUATION = 0x0010, MSG_SYMBOL_TABLE = 0x0011,
  LAYOUT_CONTIGUOUS = 1, LAYOUT_CHUNKED = 2
};

/* a range of the file that one structure claims */
typedef struct extent {
  uint64_t at, len;
  const char *what; /* "an object header", "the chunk of sample", ... */
  int obj;          /* the object it belongs to (-1: the file's or the group's) */
  hsize_t row;      /* a chunk: its first sample */
} extent;

/* what the file says of a dataset */
typedef struct dset {
  char name[NAME_MAX_LEN + 1];
  uint64_t oh;
  int rank, chunked, has_layout;
  hsize_t dims[MAX_RANK], cdims[MAX_RANK + 1]; /* cdims[rank]: the element size (chunked) */
  uint64_t elem;                               /* the datatype's size */
  uint64_t addr, bytes;                        /* contiguous: the data; chunked: the index (addr) */
  hsize_t grid[MAX_RANK], nchunks, chunk_bytes; /* chunked: the grid, its chunks, a chunk's stored size */
} dset;

struct mnt_h5_map {
  const char *sp;
  int fd;
  uint64_t size;
  unsigned leaf_k, group_k, chunk_k; /* the B-trees' K (superblock) */
  extent *ext;
  size_t next, cap;
  dset obj[MAX_OBJECTS];
  int nobj;
  uint8_t *buf; /* OH_MAX_BYTES: an object header chunk */
};

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static int damaged(const mnt_h5_map *m, int obj, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int damaged(const mnt_h5_map *m, int obj, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (obj >= 0) MNT_ERR("%s: \"%s\": %s (the shard is damaged)", m->sp, m->obj[obj].name, why);
  else MNT_ERR("%s: %s (the shard is damaged)", m->sp, why);
  return MNT_EDATA;
}

/* n bytes at byte `at` into buf: MNT_OK, MNT_EDATA (logged, naming what) when they are not all inside
 * the file, MNT_ESYS when it cannot be read */
static int get(const mnt_h5_map *m, int obj, uint64_t at, void *buf, size_t n, const char *what) {
  if (at > m->size || n > m->size - at)
    return damaged(m, obj, "%s at byte %llu lies beyond the end of the file (%llu bytes)", what,
                   (unsigned long long)at, (unsigned long long)m->size);
  for (size_t done = 0; done < n;) {
    ssize_t r = pread(m->fd, (uint8_t *)buf + done, n - done, (off_t)(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return MNT_SYSERR("%s: reading %s at byte %llu", m->sp, what, (unsigned long long)at);
    }
    done += (size_t)r;
  }
  return MNT_OK;
}

static int oom(const mnt_h5_map *m) {
  MNT_ERR("%s: out of memory mapping the shard's structures", m->sp);
  return MNT_ENOMEM;
}

/* the file range [at, at + len) claimed by a structure (checked against the others at the end) */
static int claim(mnt_h5_map *m, uint64_t at, uint64_t len, const char *what, int obj, hsize_t row) {
  if (len == 0) return MNT_OK;
  if (m->next == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    extent *e = realloc(m->ext, cap * sizeof *e);
    if (!e) return oom(m);
    m->ext = e;
    m->cap = cap;
  }
  m->ext[m->next++] = (extent){at, len, what, obj, row};
  return MNT_OK;
}

/* ---- the superblock, the root group ---------------------------------------------------------- */

/* version 0 or 1, 8-byte addresses and lengths, no user block; the B-trees' K; the root group's
 * object header address into *root */
static int superblock(mnt_h5_map *m, uint64_t *root) {
  uint8_t b[100];
  MNT_CHECK(get(m, -1, 0, b, sizeof b, "the superblock"));
  int v1 = b[8] == 1, at = v1 ? 28 : 24; /* the base address */
  if (memcmp(b, "\211HDF\r\n\032\n", 8)) return damaged(m, -1, "not an HDF5 file: no superblock at its start");
  if (b[8] > 1 || b[13] != 8 || b[14] != 8 || le(b + at, 8))
    return damaged(m, -1, "not the superblock mntrain writes (version %u, %u-byte addresses and %u-byte lengths, "
                   "no user block)", b[8], b[13], b[14]);
  m->leaf_k = (unsigned)le(b + 16, 2);
  m->group_k = (unsigned)le(b + 18, 2);
  m->chunk_k = v1 ? (unsigned)le(b + 24, 2) : 32; /* version 0: HDF5's default */
  if (m->leaf_k < 1 || m->group_k < 1 || m->chunk_k < 1)
    return damaged(m, -1, "its superblock gives a B-tree K of 0");
  *root = le(b + at + 32 + 8, 8); /* the root symbol table entry: name offset, then its header */
  return claim(m, 0, (uint64_t)at + 32 + 40, "the superblock", -1, 0);
}

/* ---- object headers ---------------------------------------------------------------------------- */

static int dataspace(const mnt_h5_map *m, int obj, const uint8_t *b, uint64_t n, dset *d) {
  size_t at = n && b[0] == 1 ? 8 : 4;
  if (n < 4 || (b[0] != 1 && b[0] != 2) || b[1] < 1 || b[1] > MAX_RANK || (b[0] == 2 && b[3] != 1) ||
      n < at + 8u * b[1])
    return damaged(m, obj, "its dataspace message is not a simple extent of 1 to %d dimensions", MAX_RANK);
  d->rank = b[1];
  for (int k = 0; k < d->rank; k++) d->dims[k] = le(b + at + 8 * k, 8);
  return MNT_OK;
}

static int layout(const mnt_h5_map *m, int obj, const uint8_t *b, uint64_t n, dset *d) {
  d->has_layout = 1;
  if (n >= 18 && b[0] == 3 && b[1] == LAYOUT_CONTIGUOUS) {
    d->addr = le(b + 2, 8);
    d->bytes = le(b + 10, 8);
    return MNT_OK;
  }
  if (n < 11 || b[0] != 3 || b[1] != LAYOUT_CHUNKED || b[2] < 2 || b[2] > MAX_RANK + 1 || n < 11 + 4u * b[2])
    return damaged(m, obj, "its layout message is neither contiguous nor chunked (version %u, class %u)",
                   n ? b[0] : 0, n > 1 ? b[1] : 0);
  d->chunked = 1;
  d->addr = le(b + 3, 8);
  d->rank = b[2] - 1; /* checked against the dataspace's below */
  for (int k = 0; k < b[2]; k++) d->cdims[k] = le(b + 11 + 4 * k, 4);
  return MNT_OK;
}

static uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

/* an attribute message's body (n bytes), version 1 as mntrain's writers leave them: its name, its
 * datatype (an integer, a float or a string), its dataspace and its data all inside the message. HDF5
 * 1.10 copies the name and the data and decodes the datatype and the dataspace without looking at
 * the message's end, so a damaged size makes it read past it (and crash) */
static int attribute(const mnt_h5_map *m, int obj, const uint8_t *b, uint64_t n) {
  uint64_t name = n >= 8 ? le(b + 2, 2) : 0, dt = n >= 8 ? le(b + 4, 2) : 0, ds = n >= 8 ? le(b + 6, 2) : 0;
  uint64_t at_dt = 8 + pad8(name), at_ds = at_dt + pad8(dt), at_data = at_ds + pad8(ds);
  if (n < 8 || b[0] != 1 || name < 1 || dt < 8 || ds < 8 || at_data > n || b[8 + name - 1])
    return damaged(m, obj, "an attribute message is not one mntrain writes, or runs past its end");
  const uint8_t *t = b + at_dt, *sp = b + at_ds;
  unsigned cls = t[0] & 0x0f, props = cls == 0 ? 4 : cls == 1 ? 12 : 0;
  uint64_t size = le(t + 4, 4), elems = 1;
  if ((t[0] >> 4) != 1 || (cls != 0 && cls != 1 && cls != 3) || dt < 8 + props || size < 1)
    return damaged(m, obj, "an attribute's datatype is not an integer, a float or a string");
  unsigned rank = sp[1], at = sp[0] == 1 ? 8 : 4, max = sp[2] & 1;
  if ((sp[0] != 1 && sp[0] != 2) || rank > MAX_RANK || ds < at + 8ull * rank * (1 + max) || (sp[0] == 2 && sp[3] > 2))
    return damaged(m, obj, "an attribute's dataspace is damaged");
  for (unsigned k = 0; k < rank; k++) {
    uint64_t d = le(sp + at + 8 * k, 8);
    elems = d && elems > UINT64_MAX / d ? UINT64_MAX : elems * d;
  }
  if (sp[0] == 2 && sp[3] == 2) elems = 0; /* a null dataspace */
  if (elems > (n - at_data) / size)
    return damaged(m, obj, "an attribute's data runs past the end of its message");
  return MNT_OK;
}

/* the version 1 object header at oh, of object obj: its ranges claimed; a dataset's dataspace,
 * datatype size and layout into m->obj[obj]; a group's symbol table into btree, heap (when not NULL) */
static int object_header(mnt_h5_map *m, int obj, uint64_t oh, uint64_t *btree, uint64_t *heap) {
  uint8_t h[16];
  MNT_CHECK(get(m, obj, oh, h, sizeof h, "an object header"));
  if (h[0] != 1) return damaged(m, obj, "its object header at byte %llu is not version 1", (unsigned long long)oh);
  uint64_t left = le(h + 2, 2), chunk[OH_MAX_CHUNKS][2] = {{oh + 16, le(h + 8, 4)}};
  MNT_CHECK(claim(m, oh, 16, "an object header", obj, 0));
  dset *d = obj >= 0 ? &m->obj[obj] : NULL, ds = {0};
  int nchunks = 1, space = 0, layout_seen = 0, rc = MNT_OK;
  for (int c = 0; c < nchunks && rc == MNT_OK; c++) {
    uint64_t len = chunk[c][1];
    if (len > OH_MAX_BYTES) return damaged(m, obj, "an object header chunk of %llu bytes", (unsigned long long)len);
    MNT_CHECK(get(m, obj, chunk[c][0], m->buf, len, "an object header chunk"));
    MNT_CHECK(claim(m, chunk[c][0], len, "an object header", obj, 0));
    for (uint64_t p = 0; p + 8 <= len && left > 0 && rc == MNT_OK; left--) {
      unsigned type = (unsigned)le(m->buf + p, 2);
      uint64_t size = le(m->buf + p + 2, 2);
      const uint8_t *b = m->buf + p + 8;
      if (size > len - p - 8) return damaged(m, obj, "a message of its object header runs past its chunk");
      if (type == MSG_CONTINUATION) {
        if (size < 16 || nchunks == OH_MAX_CHUNKS) return damaged(m, obj, "its object header continues too often");
        chunk[nchunks][0] = le(b, 8);
        chunk[nchunks++][1] = le(b + 8, 8);
      } else if (type == MSG_ATTRIBUTE) {
        rc = attribute(m, obj, b, size);
      } else if (type == MSG_SYMBOL_TABLE && btree && size >= 16) {
        *btree = le(b, 8);
        *heap = le(b + 8, 8);
      } else if (d && type == MSG_DATASPACE && !space) {
        space = 1;
        rc = dataspace(m, obj, b, size, &ds);
      } else if (d && type == MSG_DATATYPE && !d->elem && size >= 8) {
        d->elem = le(b + 4, 4);
      } else if (d && type == MSG_LAYOUT && !layout_seen) {
        layout_seen = 1;
        rc = layout(m, obj, b, size, d);
      }
      p += 8 + size;
    }
  }
  if (rc != MNT_OK || !d || !d->has_layout) return rc;
  if (!space || !d->elem) return damaged(m, obj, "its object header lacks a dataspace or a datatype");
  if (d->chunked && d->rank != ds.rank)
    return damaged(m, obj, "its layout has %d chunk dimensions for %d", d->rank, ds.rank);
  d->rank = ds.rank;
  memcpy(d->dims, ds.dims, sizeof d->dims);
  return MNT_OK;
}

/* ---- chunk indexes ----------------------------------------------------------------------------- */

static const char CHUNK[] = "the chunk of sample"; /* the `what` of a chunk's extent: it names its sample */

/* the leaf entry (key, child) of dataset obj's index; seen marks the chunks found */
static int leaf_entry(mnt_h5_map *m, int obj, const uint8_t *key, uint64_t child, uint8_t *seen, hsize_t *found) {
  dset *d = &m->obj[obj];
  hsize_t idx = 0, row = le(key + 8, 8);
  for (int k = 0; k < d->rank; k++) {
    uint64_t off = le(key + 8 + 8 * k, 8);
    if (off % d->cdims[k] || off / d->cdims[k] >= d->grid[k])
      return damaged(m, obj, "its chunk index has an entry at element %llu of dimension %d, not a chunk of its extent",
                     (unsigned long long)off, k);
    idx = idx * d->grid[k] + off / d->cdims[k];
  }
  uint64_t size = le(key, 4), mask = le(key + 4, 4);
  if (le(key + 8 + 8 * d->rank, 8) || seen[idx] || *found >= d->nchunks)
    return damaged(m, obj, "its chunk index lists the chunk of sample %llu twice or out of place",
                   (unsigned long long)row);
  seen[idx] = 1;
  ++*found;
  if (mask) return damaged(m, obj, "the chunk of sample %llu is marked to skip its checksum", (unsigned long long)row);
  /* or without the checksum, as format 1 wrote chunks (the index then tells that shard from this set's
   * format); mnt_h5_open_checked requires exactly chunk_bytes of every chunk, through HDF5's own lookup */
  if (size != d->chunk_bytes && size != d->chunk_bytes - 4)
    return damaged(m, obj, "the chunk of sample %llu is stored in %llu bytes, not %llu", (unsigned long long)row,
                   (unsigned long long)size, (unsigned long long)d->chunk_bytes);
  return claim(m, child, size, CHUNK, obj, row);
}

/* the B-tree node at addr of dataset obj's index, of level `level` (-1: the root), and all below it */
static int bt_node(mnt_h5_map *m, int obj, uint64_t addr, int level, int depth, uint8_t *seen, hsize_t *found) {
  uint8_t h[24];
  MNT_CHECK(get(m, obj, addr, h, sizeof h, "a chunk index node"));
  unsigned nused = (unsigned)le(h + 6, 2);
  size_t keysz = 8 + 8 * ((size_t)m->obj[obj].rank + 1), len = nused * (keysz + 8) + keysz;
  if (memcmp(h, "TREE", 4) || h[4] != 1 || (level >= 0 && h[5] != level) || depth > BT_MAX_DEPTH || nused < 1 ||
      nused > 2 * m->chunk_k)
    return damaged(m, obj, "its chunk index has a damaged node at byte %llu", (unsigned long long)addr);
  MNT_CHECK(claim(m, addr, 24 + 2 * (uint64_t)m->chunk_k * (keysz + 8) + keysz, "a chunk index node", obj, 0));
  uint8_t *b = malloc(len);
  if (!b) return oom(m);
  int rc = get(m, obj, addr + 24, b, len, "a chunk index node");
  for (unsigned i = 0; i < nused && rc == MNT_OK; i++) {
    const uint8_t *key = b + i * (keysz + 8);
    uint64_t child = le(key + keysz, 8);
    rc = h[5] ? bt_node(m, obj, child, h[5] - 1, depth + 1, seen, found) : leaf_entry(m, obj, key, child, seen, found);
  }
  free(b);
  return rc;
}

/* dataset obj's data: a chunked one's grid and every entry of its index (each chunk of the grid exactly
 * once), a contiguous one's bytes, all claimed */
static int data_of(mnt_h5_map *m, int obj) {
  dset *d = &m->obj[obj];
  if (!d->chunked) {
    hsize_t want = d->elem;
    for (int k = 0; k < d->rank; k++)
      want = d->dims[k] && want > UINT64_MAX / d->dims[k] ? UINT64_MAX : want * d->dims[k];
    if (d->bytes != want)
      return damaged(m, obj, "its layout holds %llu bytes, its extent needs %llu", (unsigned long long)d->bytes,
                     (unsigned long long)want);
    return d->bytes ? claim(m, d->addr, d->bytes, "its data", obj, 0) : MNT_OK;
  }
  if (d->cdims[d->rank] != d->elem || d->elem < 1)
    return damaged(m, obj, "its layout gives %llu-byte elements, its datatype %llu",
                   (unsigned long long)d->cdims[d->rank], (unsigned long long)d->elem);
  d->nchunks = 1;
  d->chunk_bytes = d->elem;
  for (int k = 0; k < d->rank; k++) { /* every chunk lies in the file, none overlapping: the products fit */
    if (d->cdims[k] < 1) return damaged(m, obj, "its chunk dimension %d is 0", k); /* (HDF5 would divide by it) */
    d->grid[k] = d->dims[k] / d->cdims[k] + (d->dims[k] % d->cdims[k] != 0);
    if (d->chunk_bytes > m->size / d->cdims[k] || (d->grid[k] && d->nchunks > m->size / d->grid[k]))
      return damaged(m, obj, "its extent (%llu along dimension %d) and chunks cannot fit in its file",
                     (unsigned long long)d->dims[k], k);
    d->chunk_bytes *= d->cdims[k];
    d->nchunks *= d->grid[k];
  }
  if (d->nchunks && d->chunk_bytes + 4 > m->size / d->nchunks)
    return damaged(m, obj, "its %llu chunks of %llu bytes cannot fit in its file", (unsigned long long)d->nchunks,
                   (unsigned long long)d->chunk_bytes + 4);
  d->chunk_bytes += 4; /* the Fletcher-32 checksum every chunk of a shard carries */
  if (d->nchunks == 0) return MNT_OK;
  if (d->addr == HADDR_UNDEF) return damaged(m, obj, "it has no chunk index: none of its chunks is stored");
  uint8_t *seen = calloc(d->nchunks, 1); /* at most the file's size (above) */
  if (!seen) return oom(m);
  hsize_t found = 0;
  int rc = bt_node(m, obj, d->addr, -1, 0, seen, &found);
  for (hsize_t c = 0; c < d->nchunks && rc == MNT_OK && found < d->nchunks; c++)
    if (!seen[c]) {
      hsize_t row = c;
      for (int k = d->rank - 1; k > 0; k--) row /= d->grid[k];
      rc = damaged(m, obj, "the chunk of sample %llu is missing from its chunk index (it would read as zeros)",
                   (unsigned long long)(row * d->cdims[0]));
    }
  free(seen);
  return rc;
}

/* ---- the root group ---------------------------------------------------------------------------- */

/* one symbol table node: each entry's name (from the heap, heap_len bytes in heap) and object */
static int symbol_node(mnt_h5_map *m, uint64_t addr, const uint8_t *heap, uint64_t heap_len) {
  uint8_t b[8 + 40 * 2 * 64];
  uint64_t len = 8 + 40 * 2 * (uint64_t)m->leaf_k;
  if (len > sizeof b) return damaged(m, -1, "its group's symbol nodes are larger than mntrain writes");
  MNT_CHECK(get(m, -1, addr, b, len, "a symbol table node"));
  unsigned n = (unsigned)le(b + 6, 2);
  if (memcmp(b, "SNOD", 4) || b[4] != 1 || n > 2 * m->leaf_k)
    return damaged(m, -1, "its group has a damaged symbol table node at byte %llu", (unsigned long long)addr);
  MNT_CHECK(claim(m, addr, len, "a symbol table node", -1, 0));
  for (unsigned i = 0; i < n; i++) {
    const uint8_t *e = b + 8 + 40 * i;
    uint64_t name = le(e, 8);
    size_t nl = name < heap_len ? strnlen((const char *)heap + name, (size_t)(heap_len - name)) : 0;
    if (name >= heap_len || nl == 0 || nl > NAME_MAX_LEN || name + nl >= heap_len)
      return damaged(m, -1, "its group names an object at heap offset %llu that holds no name",
                     (unsigned long long)name);
    if (m->nobj == MAX_OBJECTS) return damaged(m, -1, "its group holds more objects than mntrain writes");
    dset *d = &m->obj[m->nobj];
    memset(d, 0, sizeof *d);
    memcpy(d->name, heap + name, nl);
    d->oh = le(e + 8, 8);
    m->nobj++;
  }
  return MNT_OK;
}

/* the group's B-tree node at addr, of level `level` (-1: the root) */
static int group_node(mnt_h5_map *m, uint64_t addr, int level, int depth, const uint8_t *heap, uint64_t heap_len) {
  uint8_t h[24];
  MNT_CHECK(get(m, -1, addr, h, sizeof h, "a group node"));
  unsigned nused = (unsigned)le(h + 6, 2);
  if (memcmp(h, "TREE", 4) || h[4] != 0 || (level >= 0 && h[5] != level) || depth > BT_MAX_DEPTH ||
      nused > 2 * m->group_k)
    return damaged(m, -1, "its group has a damaged B-tree node at byte %llu", (unsigned long long)addr);
  uint64_t len = 24 + 2 * (uint64_t)m->group_k * 16 + 8;
  MNT_CHECK(claim(m, addr, len, "a group node", -1, 0));
  uint8_t *b = malloc(len);
  if (!b) return oom(m);
  int rc = get(m, -1, addr + 24, b, len - 24, "a group node");
  for (unsigned i = 0; i < nused && rc == MNT_OK; i++) {
    uint64_t child = le(b + 8 + 16 * i, 8);
    rc = h[5] ? group_node(m, child, h[5] - 1, depth + 1, heap, heap_len) : symbol_node(m, child, heap, heap_len);
  }
  free(b);
  return rc;
}

/* the root group: its header, its local heap of names, its B-tree and symbol nodes; the objects listed */
static int root_group(mnt_h5_map *m, uint64_t root) {
  uint64_t btree = HADDR_UNDEF, heap = HADDR_UNDEF;
  MNT_CHECK(object_header(m, -1, root, &btree, &heap));
  uint8_t h[32];
  MNT_CHECK(get(m, -1, heap, h, sizeof h, "the group's heap"));
  uint64_t len = le(h + 8, 8), at = le(h + 24, 8);
  if (memcmp(h, "HEAP", 4) || h[4] != 0 || len > HEAP_MAX_BYTES)
    return damaged(m, -1, "its group's heap at byte %llu is damaged", (unsigned long long)heap);
  MNT_CHECK(claim(m, heap, sizeof h, "the group's heap", -1, 0));
  MNT_CHECK(claim(m, at, len, "the group's heap", -1, 0));
  uint8_t *names = malloc(len ? len : 1);
  if (!names) return oom(m);
  int rc = get(m, -1, at, names, len, "the group's heap");
  if (rc == MNT_OK) rc = group_node(m, btree, -1, 0, names, len);
  free(names);
  return rc;
}

/* ---- the map ----------------------------------------------------------------------------------- */

static int by_start(const void *a, const void *b) {
  const extent *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

static void describe(const mnt_h5_map *m, const extent *e, char *out, size_t n) {
  const char *obj = e->obj >= 0 ? m->obj[e->obj].name : NULL;
  if (e->what == CHUNK)
    snprintf(out, n, "%s %llu of \"%s\"", e->what, (unsigned long long)e->row, obj);
  else if (obj)
    snprintf(out, n, "%s of \"%s\"", e->what, obj);
  else
    snprintf(out, n, "%s", e->what);
}

/* every claimed range inside the file, no two overlapping */
static int disjoint(mnt_h5_map *m) {
  qsort(m->ext, m->next, sizeof *m->ext, by_start);
  for (size_t i = 0; i < m->next; i++) {
    const extent *e = &m->ext[i];
    char a[160], b[160];
    if (e->at > m->size || e->len > m->size - e->at) {
      describe(m, e, a, sizeof a);
      return damaged(m, -1, "%s lies beyond the end of the file (at byte %llu)", a, (unsigned long long)e->at);
    }
    if (i && m->ext[i - 1].at + m->ext[i - 1].len > e->at) {
      describe(m, &m->ext[i - 1], a, sizeof a);
      describe(m, e, b, sizeof b);
      return damaged(m, -1, "%s and %s overlap in the file (at byte %llu)", a, b, (unsigned long long)e->at);
    }
  }
  return MNT_OK;
}

void mnt_h5_map_free(mnt_h5_map *m) {
  if (!m) return;
  free(m->ext);
  free(m->buf);
  free(m);
}

int mnt_h5_map_shard(const char *sp, mnt_h5_map **out) {
  *out = NULL;
  mnt_h5_map *m = calloc(1, sizeof *m);
  if (!m || !(m->buf = malloc(OH_MAX_BYTES))) {
    mnt_h5_map_free(m);
    MNT_ERR("%s: out of memory mapping the shard's structures", sp);
    return MNT_ENOMEM;
  }
  m->sp = sp;
  m->fd = open(sp, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (m->fd < 0 || fstat(m->fd, &sb) != 0) {
    int st = m->fd < 0 && mnt_fd_short(sp, ", or convert the data into fewer shards (--shards)")
                 ? MNT_ESYS
                 : MNT_SYSERR("%s: cannot open the shard", sp);
    if (m->fd >= 0) close(m->fd);
    mnt_h5_map_free(m);
    return st;
  }
  m->size = (uint64_t)sb.st_size;
  uint64_t root = 0;
  int rc = superblock(m, &root);
  if (rc == MNT_OK) rc = root_group(m, root);
  for (int i = 0; i < m->nobj && rc == MNT_OK; i++) {
    rc = object_header(m, i, m->obj[i].oh, NULL, NULL);
    if (rc == MNT_OK && m->obj[i].has_layout) rc = data_of(m, i);
  }
  if (rc == MNT_OK) rc = disjoint(m);
  close(m->fd);
  m->fd = -1;
  if (rc != MNT_OK) {
    mnt_h5_map_free(m);
    return rc;
  }
  *out = m;
  return MNT_OK;
}

/* ---- a dataset opened ---------------------------------------------------------------------------- */

static void dims_text(char *out, size_t n, int rank, const hsize_t *d) {
  int at = snprintf(out, n, "%llu", (unsigned long long)d[0]);
  for (int k = 1; k < rank && at > 0 && (size_t)at < n; k++)
    at += snprintf(out + at, n - (size_t)at, "x%llu", (unsigned long long)d[k]);
}

/* the dataset as HDF5 opened it (ds) against the map's (d): the exact type, the extent, the layout
 * and filters, and HDF5's own lookup finding every chunk at its stored size */
static int hdf5_view(const mnt_h5_map *m, int obj, hid_t ds, hid_t ftype) {
  const dset *d = &m->obj[obj];
  hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds), pl = H5Dget_create_plist(ds);
  hsize_t dims[MAX_RANK] = {0}, cdims[MAX_RANK] = {0};
  unsigned flags = 0;
  size_t ncd = 0;
  int ok = t >= 0 && sp >= 0 && pl >= 0 && H5Tequal(t, ftype) > 0 && H5Sget_simple_extent_ndims(sp) == d->rank &&
           H5Sget_simple_extent_dims(sp, dims, NULL) == d->rank &&
           !memcmp(dims, d->dims, (size_t)d->rank * sizeof *dims);
  if (ok && d->chunked)
    ok = H5Pget_layout(pl) == H5D_CHUNKED && H5Pget_chunk(pl, d->rank, cdims) == d->rank &&
         !memcmp(cdims, d->cdims, (size_t)d->rank * sizeof *cdims) && H5Pget_nfilters(pl) == 1 &&
         H5Pget_filter2(pl, 0, &flags, &ncd, NULL, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32;
  else if (ok)
    ok = H5Pget_layout(pl) == H5D_CONTIGUOUS && H5Pget_nfilters(pl) == 0 && (!d->bytes || H5Dget_offset(ds) == d->addr);
  if (t >= 0) H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  if (pl >= 0) H5Pclose(pl);
  if (!ok)
    return damaged(m, obj, "its type, extent, layout or filters are not those mntrain writes (%s)",
                   d->chunked ? "chunked, Fletcher-32 on every chunk" : "contiguous, unfiltered");
  for (hsize_t c = 0; c < (d->chunked ? d->nchunks : 0); c++) {
    hsize_t off[MAX_RANK], r = c, size = 0;
    for (int k = d->rank - 1; k >= 0; k--) {
      off[k] = r % d->grid[k] * d->cdims[k];
      r /= d->grid[k];
    }
    if (H5Dget_chunk_storage_size(ds, off, &size) < 0 || size != d->chunk_bytes)
      return damaged(m, obj, "HDF5's lookup in its chunk index does not find the chunk of sample %llu (it would "
                     "read as zeros)", (unsigned long long)off[0]);
  }
  return MNT_OK;
}

/* The object header address a hard link points to (-1: no such hard link). HDF5 1.12 replaced the
 * link's address by an object token (H5Lget_info2, H5O_token_t); the native file format's token
 * holds the address, which H5VLnative_token_to_addr gives back. */
static int link_address(hid_t f, const char *name, haddr_t *at) {
#if H5_VERSION_GE(1, 12, 0)
  H5L_info2_t li;
  if (H5Lget_info2(f, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return -1;
  return H5VLnative_token_to_addr(f, li.u.token, at) < 0 ? -1 : 0;
#else
  H5L_info_t li;
  if (H5Lget_info(f, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) return -1;
  *at = li.u.address;
  return 0;
#endif
}

int mnt_h5_open_checked(const mnt_h5_map *m, hid_t f, const char *name, hid_t ftype, int rank, const hsize_t *dims,
                        int chunked, hid_t *ds) {
  *ds = -1;
  int obj = -1;
  for (int i = 0; i < m->nobj; i++)
    if (!strcmp(m->obj[i].name, name)) obj = i;
  haddr_t at;
  if (obj < 0 || !m->obj[obj].has_layout || link_address(f, name, &at) < 0) {
    MNT_ERR("%s: no \"%s\" dataset", m->sp, name);
    return MNT_EDATA;
  }
  const dset *d = &m->obj[obj];
  if (at != d->oh)
    return damaged(m, obj, "HDF5 finds it at byte %llu, its group's symbol table at byte %llu", (unsigned long long)at,
                   (unsigned long long)d->oh);
  if (d->rank != rank || memcmp(d->dims, dims, (size_t)rank * sizeof *dims)) {
    char have[100], want[100];
    dims_text(have, sizeof have, d->rank, d->dims);
    dims_text(want, sizeof want, rank, dims);
    MNT_ERR("%s: \"%s\" is %s, the index says %s", m->sp, name, have, want);
    return MNT_EDATA;
  }
  if (d->chunked != chunked || d->elem != H5Tget_size(ftype))
    return damaged(m, obj, "it is stored %s with %llu-byte elements, as mntrain never writes it",
                   d->chunked ? "in chunks" : "contiguous", (unsigned long long)d->elem);
  hid_t h = H5Dopen2(f, name, H5P_DEFAULT);
  if (h < 0) return damaged(m, obj, "HDF5 cannot open it");
  int rc = hdf5_view(m, obj, h, ftype);
  if (rc != MNT_OK) {
    H5Dclose(h);
    return rc;
  }
  *ds = h;
  return MNT_OK;
}
