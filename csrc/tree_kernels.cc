// Fused CPU kernels for jaxdqn's 16-ary sum/min tree (jaxdqn/buffers/segment_tree.py).
//
// Why: in XLA:CPU a prioritized sample + update is some 40-70 small kernels per call, each
// costing about a microsecond of dispatch, around a few hundred random cache-line reads. Here
// the descent of all draws and the ancestor updates are plain loops over the same flat
// layout, with exactly the same float32 arithmetic as the XLA program (left-to-right sums of
// 16 children, the same clamp of the target mass), so both paths give bitwise-equal trees,
// indices and priorities. Registered as XLA FFI handlers; called through jax.ffi.ffi_call.
//
// Also here: the gather of sampled items from the replay ring's storage (GatherRowsImpl).
//
// Layout: trees is [..., 2, M] float32 (row 0 sums, row 1 mins); leading axes are a batch of
// independent trees (vmap). Levels root first, each padded to a multiple of 16 nodes; the
// children of node i of a level are nodes 16 i .. 16 i + 15 of the next level.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kFanout = 16;

struct Level {
  int64_t offset;  // first node of the level in a row
  int64_t nodes;   // real nodes
};

// The same levels as segment_tree.layout(capacity), root first.
std::vector<Level> Layout(int64_t capacity) {
  std::vector<int64_t> counts{capacity};
  while (counts.back() > 1) counts.push_back((counts.back() + kFanout - 1) / kFanout);
  std::vector<Level> levels;
  int64_t offset = 0;
  for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
    levels.push_back({offset, *it});
    offset += (*it + kFanout - 1) / kFanout * kFanout;
  }
  return levels;
}

int64_t RowLength(const std::vector<Level>& levels) {
  const Level& last = levels.back();
  return last.offset + (last.nodes + kFanout - 1) / kFanout * kFanout;
}

// Whether `trees` is [..., 2, M] with M the row length of `capacity` leaves (else why not).
template <typename B>
std::optional<ffi::Error> CheckTrees(const B& trees, int64_t row, const char* kernel) {
  auto dims = trees.dimensions();
  if (dims.size() < 2 || dims[dims.size() - 1] != row || dims[dims.size() - 2] != 2)
    return ffi::Error::InvalidArgument(std::string(kernel) +
                                       ": trees must be [..., 2, M] for this capacity");
  return std::nullopt;
}

// Product of all dimensions but the last `trailing` ones.
template <typename B>
int64_t BatchOf(const B& buffer, size_t trailing) {
  auto dims = buffer.dimensions();
  int64_t n = 1;
  for (size_t i = 0; i + trailing < dims.size(); ++i) n *= dims[i];
  return n;
}

// nextafter(x, 0) for x >= 0 (and +inf -> FLT_MAX), branch-free so that it vectorizes.
inline float TowardZero(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits -= (bits != 0 && bits < 0x7f800001u);  // zero stays zero, NaN stays NaN
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Draws or parents are handled in tiles of this many: each level first prefetches the tile's
// blocks (their addresses are all known), then copies them into columns [16][kTile] and works
// column by column, so the 15 dependent additions of a block overlap across the tile (the
// same left-to-right order per block as XLA's program: bitwise the same sums).
constexpr int64_t kTile = 64;

// The tile loops are compiled twice on x86-64, for AVX2 and for the baseline, and the loader
// picks one for the CPU it runs on (the package is built where it is installed, but a built
// wheel may travel). Elementwise float ops: both give bitwise the same results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TREE_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define TREE_KERNEL
#endif

// Descent: for each mass, the leaf j with sum(p[:j]) <= mass < sum(p[:j+1]) (see
// segment_tree.find_prefix_sum for the clamp that keeps it on a positive leaf).
TREE_KERNEL void DrawTile(const float* sums, int64_t row, const std::vector<Level>& levels,
                          const float* mass, int64_t n,
              int32_t* out_leaf, float* out_p) {
  float cols[kFanout][kTile];
  float remaining[kTile];
  int32_t node[kTile];
  for (int64_t i = 0; i < n; ++i) remaining[i] = mass[i], node[i] = 0;
  for (size_t depth = 1; depth < levels.size(); ++depth) {
    const float* level = sums + levels[depth].offset;
    for (int64_t i = 0; i < n; ++i) __builtin_prefetch(level + int64_t{node[i]} * kFanout);
    for (int64_t i = 0; i < n; ++i) {
      const float* block = level + int64_t{node[i]} * kFanout;
      for (int j = 0; j < kFanout; ++j) cols[j][i] = block[j];
    }
    for (int j = 1; j < kFanout; ++j)
      for (int64_t i = 0; i < n; ++i) cols[j][i] = cols[j - 1][i] + cols[j][i];
    int32_t child[kTile];
    float below[kTile];
    for (int64_t i = 0; i < n; ++i) {
      remaining[i] = std::min(remaining[i], TowardZero(cols[kFanout - 1][i]));
      child[i] = 0;
      below[i] = 0.0f;
    }
    for (int j = 0; j < kFanout; ++j)
      for (int64_t i = 0; i < n; ++i) {
        const bool passed = cols[j][i] <= remaining[i];
        child[i] += passed;
        below[i] = std::max(below[i], passed ? cols[j][i] : 0.0f);
      }
    for (int64_t i = 0; i < n; ++i) {
      node[i] = node[i] * kFanout + std::min<int32_t>(child[i], kFanout - 1);
      remaining[i] = remaining[i] - below[i];
    }
  }
  const float* leaf_row = sums + levels.back().offset;
  for (int64_t i = 0; i < n; ++i) __builtin_prefetch(leaf_row + node[i]);
  // The priority update that follows a sample writes these leaves in both rows: start
  // bringing the min row's lines too (the sum row's are in cache after the descent).
  for (int64_t i = 0; i < n; ++i) __builtin_prefetch(leaf_row + row + node[i], 1);
  for (int64_t i = 0; i < n; ++i) {
    out_leaf[i] = node[i];
    out_p[i] = leaf_row[node[i]];
  }
}

ffi::Error DrawImpl(ffi::Buffer<ffi::F32> trees, ffi::Buffer<ffi::F32> mass, int64_t capacity,
                    ffi::ResultBuffer<ffi::S32> leaves, ffi::ResultBuffer<ffi::F32> priorities,
                    ffi::ResultBuffer<ffi::F32> minimum) {
  const std::vector<Level> levels = Layout(capacity);
  const int64_t row = RowLength(levels);
  if (auto error = CheckTrees(trees, row, "tree_draw")) return *error;
  const int64_t batch = BatchOf(trees, 2);
  if (BatchOf(mass, 1) != batch)
    return ffi::Error::InvalidArgument("tree_draw: trees and mass batch shapes differ");
  const int64_t draws = mass.dimensions().back();
  for (int64_t b = 0; b < batch; ++b) {
    const float* sums = trees.typed_data() + b * 2 * row;
    for (int64_t start = 0; start < draws; start += kTile) {
      const int64_t at = b * draws + start;
      DrawTile(sums, row, levels, mass.typed_data() + at, std::min(kTile, draws - start),
               leaves->typed_data() + at, priorities->typed_data() + at);
    }
    minimum->typed_data()[b] = sums[row];  // the min tree's root
  }
  return ffi::Error::Success();
}

// Recomputes parents[0:n] of one level from their children blocks, both rows: the portable
// form (copies the blocks into columns, then adds across the tile).
inline __attribute__((always_inline)) void FixParentsByColumns(
    float* sums, float* mins, int64_t child_offset, int64_t parent_offset, const int32_t* parents,
    int64_t n) {
  float cols[kFanout][kTile];
  float low[kFanout][kTile];
  for (int64_t i = 0; i < n; ++i) {
    __builtin_prefetch(sums + child_offset + int64_t{parents[i]} * kFanout);
    __builtin_prefetch(mins + child_offset + int64_t{parents[i]} * kFanout);
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* block = sums + child_offset + int64_t{parents[i]} * kFanout;
    const float* min_block = mins + child_offset + int64_t{parents[i]} * kFanout;
    for (int j = 0; j < kFanout; ++j) cols[j][i] = block[j], low[j][i] = min_block[j];
  }
  for (int j = 1; j < kFanout; ++j)
    for (int64_t i = 0; i < n; ++i) {
      cols[j][i] = cols[j - 1][i] + cols[j][i];
      low[j][i] = std::min(low[j - 1][i], low[j][i]);
    }
  for (int64_t i = 0; i < n; ++i) {
    sums[parent_offset + parents[i]] = cols[kFanout - 1][i];
    mins[parent_offset + parents[i]] = low[kFanout - 1][i];
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Sixteen floats in one AVX-512 register (GCC vector extensions).
typedef float F16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) F16 LoadBlock(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);  // an unaligned load
  return v;
}

typedef int I16 __attribute__((vector_size(64)));  // a shuffle's lane indices

// Swaps bit D of the row and column indices of 16 rows of 16 floats; the four stages
// D = 1, 2, 4, 8 make r[j][i] what r[i][j] was (a 16 x 16 transpose in 64 two-source
// shuffles, one instruction each with AVX-512). GCC's __builtin_shuffle (GCC >= 4.7; its
// __builtin_shufflevector came only in GCC 12) with constant lane indices.
#define JAXDQN_STAGE(D, LO, HI)                          \
  for (int a = 0; a < 16; ++a)                           \
    if (!(a & D)) {                                      \
      const F16 x = r[a], y = r[a + D];                  \
      r[a] = __builtin_shuffle(x, y, (I16){LO});         \
      r[a + D] = __builtin_shuffle(x, y, (I16){HI});     \
    }
#define JAXDQN_LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define JAXDQN_HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define JAXDQN_LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define JAXDQN_HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define JAXDQN_LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define JAXDQN_HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define JAXDQN_LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define JAXDQN_HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31

inline __attribute__((always_inline)) void Transpose(F16 (&r)[16]) {
  JAXDQN_STAGE(1, JAXDQN_LO1, JAXDQN_HI1)
  JAXDQN_STAGE(2, JAXDQN_LO2, JAXDQN_HI2)
  JAXDQN_STAGE(4, JAXDQN_LO4, JAXDQN_HI4)
  JAXDQN_STAGE(8, JAXDQN_LO8, JAXDQN_HI8)
}

// The AVX-512 form: 16 children blocks are loaded and transposed in registers, so that child
// j of 16 parents is one vector, and each parent's left-to-right sum is 15 vector additions
// in the same order per lane (bitwise the portable form's). The portable form's scalar copy
// into columns was most of the kernel's time (measured: a scan of 128-leaf updates at
// capacity 1M, 8.3 against 4.1 us per step, drawing the random slots included). Without AVX-512 (where GCC splits these vectors) the
// portable form is faster, so the loader picks per CPU (GCC function multiversioning).
__attribute__((target("avx512f"))) void FixParents(float* sums, float* mins, int64_t child_offset,
                                                   int64_t parent_offset, const int32_t* parents,
                                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    __builtin_prefetch(sums + child_offset + int64_t{parents[i]} * kFanout);
    __builtin_prefetch(mins + child_offset + int64_t{parents[i]} * kFanout);
  }
  for (int64_t g = 0; g < n; g += 16) {
    const int64_t m = std::min<int64_t>(16, n - g);
    F16 r[16];
    // Lanes past m repeat the first parent's block: computed, never stored.
    for (int64_t i = 0; i < 16; ++i)
      r[i] = LoadBlock(sums + child_offset + int64_t{parents[g + (i < m ? i : 0)]} * kFanout);
    Transpose(r);
    F16 total = r[0];
    for (int j = 1; j < kFanout; ++j) total = total + r[j];
    for (int64_t i = 0; i < 16; ++i)
      r[i] = LoadBlock(mins + child_offset + int64_t{parents[g + (i < m ? i : 0)]} * kFanout);
    Transpose(r);
    F16 low = r[0];
    for (int j = 1; j < kFanout; ++j) low = r[j] < low ? r[j] : low;
    for (int64_t i = 0; i < m; ++i) {
      sums[parent_offset + parents[g + i]] = total[i];
      mins[parent_offset + parents[g + i]] = low[i];
    }
  }
}

__attribute__((target("avx2"))) void FixParents(float* sums, float* mins, int64_t child_offset,
                                                int64_t parent_offset, const int32_t* parents,
                                                int64_t n) {
  FixParentsByColumns(sums, mins, child_offset, parent_offset, parents, n);
}

__attribute__((target("default"))) void FixParents(float* sums, float* mins, int64_t child_offset,
                                                   int64_t parent_offset, const int32_t* parents,
                                                   int64_t n) {
  FixParentsByColumns(sums, mins, child_offset, parent_offset, parents, n);
}
#else
void FixParents(float* sums, float* mins, int64_t child_offset, int64_t parent_offset,
                const int32_t* parents, int64_t n) {
  FixParentsByColumns(sums, mins, child_offset, parent_offset, parents, n);
}
#endif

// Writes values at leaf slots in order (a slot named twice keeps its last value), then
// recomputes every ancestor of a touched leaf from its 16 children, level by level (a parent
// named twice is recomputed twice, to the same values).
ffi::Error SetImpl(ffi::Buffer<ffi::F32> trees_in, ffi::Buffer<ffi::S32> slots,
                   ffi::Buffer<ffi::F32> values, int64_t capacity,
                   ffi::ResultBuffer<ffi::F32> trees) {
  const std::vector<Level> levels = Layout(capacity);
  const int64_t row = RowLength(levels);
  if (auto error = CheckTrees(trees_in, row, "tree_set")) return *error;
  const int64_t batch = BatchOf(trees_in, 2);
  if (BatchOf(slots, 1) != batch || BatchOf(values, 1) != batch)
    return ffi::Error::InvalidArgument("tree_set: trees, slots and values batch shapes differ");
  const int64_t k = slots.dimensions().back();
  if (values.dimensions().back() != k)
    return ffi::Error::InvalidArgument("tree_set: slots and values lengths differ");
  for (int64_t i = 0; i < batch * k; ++i)
    if (slots.typed_data()[i] < 0 || slots.typed_data()[i] >= capacity)
      return ffi::Error::InvalidArgument("tree_set: a slot is outside [0, capacity)");
  if (trees->typed_data() != trees_in.typed_data())  // not aliased: start from a copy
    std::memcpy(trees->typed_data(), trees_in.typed_data(), trees_in.size_bytes());
  std::vector<int32_t> nodes(k), all_nodes(k);
  for (int64_t i = 0; i < k; ++i) all_nodes[i] = static_cast<int32_t>(i);
  const int64_t leaf_offset = levels.back().offset;
  for (int64_t b = 0; b < batch; ++b) {
    float* sums = trees->typed_data() + b * 2 * row;
    float* mins = sums + row;
    const int32_t* s = slots.typed_data() + b * k;
    const float* v = values.typed_data() + b * k;
    for (int64_t i = 0; i < k; ++i) {
      __builtin_prefetch(sums + leaf_offset + s[i], 1);
      __builtin_prefetch(mins + leaf_offset + s[i], 1);
    }
    for (int64_t i = 0; i < k; ++i) {
      sums[leaf_offset + s[i]] = v[i];
      mins[leaf_offset + s[i]] = v[i];
    }
    for (int64_t i = 0; i < k; ++i) nodes[i] = s[i];
    for (size_t depth = levels.size() - 1; depth > 0; --depth) {
      const Level& parent_level = levels[depth - 1];
      const int32_t* parents = nodes.data();
      int64_t n = k;
      if (parent_level.nodes <= k) {
        // Fewer parents in the level than touched ones: recompute them all, in order (the
        // others get the values they hold already: every parent is its children's sum).
        n = parent_level.nodes;
        parents = all_nodes.data();
      }
      for (int64_t i = 0; i < k; ++i) nodes[i] /= kFanout;
      for (int64_t start = 0; start < n; start += kTile)
        FixParents(sums, mins, levels[depth].offset, parent_level.offset, parents + start,
                   std::min(kTile, n - start));
    }
  }
  return ffi::Error::Success();
}

// Item rows: the replay ring's storage leaves, [..batch, N, ...item] each, read a row (one
// item) at a time. XLA:CPU splits a gather from an array of 512 KiB or more into tasks for
// its thread pool even when it reads a handful of rows (its cost model counts the whole
// array); on a small machine the hand-off costs more than the copy and moves the rows' cache
// lines between cores (measured on 2 cores at capacity 1M: iterations of the buffer
// benchmark went from ~16 to ~33 us in most runs). This call copies the rows on the calling
// thread, every row prefetched before any is copied.

// The rows of one store: its first byte, bytes per row, rows per batch element.
struct Store {
  char* data;
  int64_t row_bytes;
  int64_t rows;
};

// Reads the layout of a store ([..batch, N, ...item], batch = `batch_dims` leading axes).
template <typename B>
std::optional<ffi::Error> StoreOf(const B& buffer, size_t batch_dims, int64_t batch,
                                  const char* kernel, Store& out) {
  auto dims = buffer.dimensions();
  if (dims.size() <= batch_dims || BatchOf(buffer, dims.size() - batch_dims) != batch)
    return ffi::Error::InvalidArgument(std::string(kernel) +
                                       ": a store's leading axes are not the slots' batch axes");
  const int64_t rows = dims[batch_dims];
  out.rows = rows;
  out.row_bytes = rows == 0 ? 0 : static_cast<int64_t>(buffer.size_bytes()) / (batch * rows);
  out.data = static_cast<char*>(buffer.untyped_data());
  return std::nullopt;
}

// Checks that every slot is a row of a store of `rows` rows.
std::optional<ffi::Error> CheckSlots(const int32_t* slots, int64_t n, int64_t rows,
                                     const char* kernel) {
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] < 0 || slots[i] >= rows)
      return ffi::Error::InvalidArgument(std::string(kernel) + ": a slot is outside [0, N)");
  return std::nullopt;
}

// At most this many cache lines of each row are prefetched (larger rows stream).
constexpr int64_t kPrefetchLines = 4;

// to[i] = from[slots[i]] for rows of `bytes` bytes (the common sizes get a copy of fixed
// size, inlined; a call to memcpy per row would cost more than the copy).
template <int64_t kBytes>
void CopyRowsOf(char* to, const char* from, const int32_t* slots, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(to + i * kBytes, from + int64_t{slots[i]} * kBytes, kBytes);
}

void CopyRows(char* to, const char* from, const int32_t* slots, int64_t n, int64_t bytes) {
  switch (bytes) {
    case 1: return CopyRowsOf<1>(to, from, slots, n);
    case 2: return CopyRowsOf<2>(to, from, slots, n);
    case 4: return CopyRowsOf<4>(to, from, slots, n);
    case 8: return CopyRowsOf<8>(to, from, slots, n);
    case 12: return CopyRowsOf<12>(to, from, slots, n);
    case 16: return CopyRowsOf<16>(to, from, slots, n);
    case 32: return CopyRowsOf<32>(to, from, slots, n);
    case 64: return CopyRowsOf<64>(to, from, slots, n);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(to + i * bytes, from + int64_t{slots[i]} * bytes, bytes);
  }
}

// outs[k][i] = stores[k][slots[i]] for every store k: all rows are prefetched first, so
// their cache misses overlap, then copied.
ffi::Error GatherRowsImpl(ffi::Buffer<ffi::S32> slots, ffi::RemainingArgs stores,
                          ffi::RemainingRets outs) {
  if (outs.size() != stores.size())
    return ffi::Error::InvalidArgument("gather_rows: one output per store");
  const size_t batch_dims = slots.dimensions().size() - 1;
  const int64_t batch = BatchOf(slots, 1);
  const int64_t n = slots.dimensions().back();
  std::vector<Store> from(stores.size()), to(stores.size());
  for (size_t k = 0; k < stores.size(); ++k) {
    auto store = stores.get<ffi::AnyBuffer>(k);
    if (!store.has_value()) return store.error();
    if (auto error = StoreOf(*store, batch_dims, batch, "gather_rows", from[k])) return *error;
    auto out = outs.get<ffi::AnyBuffer>(k);
    if (!out.has_value()) return out.error();
    if (auto error = StoreOf(**out, batch_dims, batch, "gather_rows", to[k])) return *error;
    if (to[k].rows != n || to[k].row_bytes != from[k].row_bytes)
      return ffi::Error::InvalidArgument("gather_rows: an output is not [..., slots, ...item]");
    if (from[k].rows != from[0].rows)  // the slots are checked against one N for all
      return ffi::Error::InvalidArgument("gather_rows: the stores hold different numbers of rows");
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* s = slots.typed_data() + b * n;
    if (!from.empty())
      if (auto error = CheckSlots(s, n, from[0].rows, "gather_rows")) return *error;
    for (const Store& store : from) {
      const char* base = store.data + b * store.rows * store.row_bytes;
      const int64_t lines = std::min<int64_t>(kPrefetchLines, (store.row_bytes + 63) / 64);
      for (int64_t i = 0; i < n; ++i) {
        const char* row = base + int64_t{s[i]} * store.row_bytes;
        for (int64_t line = 0; line < lines; ++line) __builtin_prefetch(row + 64 * line);
        __builtin_prefetch(row + store.row_bytes - 1);  // a row across a line boundary
      }
    }
    for (size_t k = 0; k < from.size(); ++k) {
      const int64_t bytes = from[k].row_bytes;
      const char* base = from[k].data + b * from[k].rows * bytes;
      char* out = to[k].data + b * n * bytes;
      CopyRows(out, base, s, n, bytes);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxdqnTreeDraw, DrawImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("capacity")
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxdqnTreeSet, SetImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("capacity")
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxdqnGatherRows, GatherRowsImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
