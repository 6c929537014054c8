// The original study's CPU ring-allreduce, rebuilt from its README's description so the
// harness can time it beside our Python rings on the same machine:
//   - one std::jthread per node, spawned for every call and joined at its end;
//   - every node reads its left neighbour's buffer directly (one address space);
//   - one std::barrier shared by all nodes, arrived at after every one of the 2(N-1) steps;
//   - chunks that differ in length by at most one element (the first total % N are longer).
// The schedule is ring.schedule's: at reduce-scatter step s node i accumulates chunk
// (i-1-s) mod N of node i-1 into its own; at all-gather step s it copies chunk (i-s) mod N.
//
// C ABI (loaded with ctypes, which releases the GIL around the call):
//   int seed_allreduce(void** buffers, int nodes, int64_t count, int dtype, int op)
//     dtype: 0 float32, 1 float64, 2 int32, 3 int64;  op: 0 sum, 1 prod, 2 max, 3 min, 4 avg
//     returns 0, or SEED_BAD_ARGUMENT / SEED_BAD_DTYPE_OR_OP / SEED_NO_THREADS /
//     SEED_OUT_OF_RESOURCES.
//   void seed_chunk_range(int64_t total, int64_t chunks, int64_t index,
//                         int64_t* start, int64_t* stop)

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

constexpr int SEED_OK = 0;
constexpr int SEED_BAD_ARGUMENT = 1;
constexpr int SEED_BAD_DTYPE_OR_OP = 2;
constexpr int SEED_NO_THREADS = 3;
constexpr int SEED_OUT_OF_RESOURCES = 4;

struct Range {
    std::int64_t start;
    std::int64_t stop;
};

inline Range chunk_range(std::int64_t total, std::int64_t chunks, std::int64_t index) {
    const std::int64_t base = total / chunks;
    const std::int64_t extra = total % chunks;
    const std::int64_t start = index * base + std::min(index, extra);
    return {start, start + base + (index < extra ? 1 : 0)};
}

// Integers wrap modulo 2^bits as NumPy's do; signed overflow would be undefined in C++,
// so sums and products of integers are taken in the unsigned type of the same width.
template <class T>
struct ArithOf {
    using type = T;
};
template <class T>
    requires std::is_integral_v<T>
struct ArithOf<T> {
    using type = std::make_unsigned_t<T>;
};
template <class T>
using Arith = typename ArithOf<T>::type;

struct Sum {
    template <class T>
    static T apply(T a, T b) {
        return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
    }
};
struct Prod {
    template <class T>
    static T apply(T a, T b) {
        return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
    }
};
struct Max {
    template <class T>
    static T apply(T a, T b) { return a < b ? b : a; }
};
struct Min {
    template <class T>
    static T apply(T a, T b) { return b < a ? b : a; }
};
// avg (NCCL's ncclAvg) accumulates as a sum; each node divides the chunk it completes, at
// the end of reduce-scatter, so all-gather copies averages.  Integers divide as C does,
// the quotient truncated toward zero, as ring.ops documents.
struct Avg : Sum {};
template <class Op>
inline constexpr bool averages = false;
template <>
inline constexpr bool averages<Avg> = true;

template <class T, class Op>
void run_node(T* const* buffers, int nodes, std::int64_t count, int node,
              std::barrier<>& step_done) {
    T* mine = buffers[node];
    const T* left = buffers[(node + nodes - 1) % nodes];
    for (int step = 0; step < nodes - 1; ++step) {
        const Range r = chunk_range(count, nodes, ((node - 1 - step) % nodes + nodes) % nodes);
        for (std::int64_t i = r.start; i < r.stop; ++i) mine[i] = Op::apply(mine[i], left[i]);
        if constexpr (averages<Op>) {
            if (step == nodes - 2) {
                const T n = static_cast<T>(nodes);
                for (std::int64_t i = r.start; i < r.stop; ++i) mine[i] = mine[i] / n;
            }
        }
        step_done.arrive_and_wait();
    }
    for (int step = 0; step < nodes - 1; ++step) {
        const Range r = chunk_range(count, nodes, ((node - step) % nodes + nodes) % nodes);
        std::copy(left + r.start, left + r.stop, mine + r.start);
        step_done.arrive_and_wait();
    }
}

template <class T, class Op>
int allreduce(void** raw, int nodes, std::int64_t count) {
    T* const* buffers = reinterpret_cast<T* const*>(raw);
    if (nodes < 2) return SEED_OK;  // one node already holds the result
    std::barrier<> step_done(nodes);
    // Nodes start together once all exist: if the system refuses a thread, the ones already
    // running leave instead of waiting forever at a barrier the missing node never reaches.
    std::latch all_spawned(1);
    std::atomic<bool> abandoned{false};
    {
        std::vector<std::jthread> threads;
        threads.reserve(static_cast<std::size_t>(nodes));
        try {
            for (int node = 0; node < nodes; ++node) {
                threads.emplace_back([&, node] {
                    all_spawned.wait();
                    if (!abandoned.load()) run_node<T, Op>(buffers, nodes, count, node, step_done);
                });
            }
        } catch (const std::system_error&) {
            abandoned.store(true);
        }
        all_spawned.count_down();
    }  // every jthread joins here
    return abandoned.load() ? SEED_NO_THREADS : SEED_OK;
}

template <class T>
int with_op(void** buffers, int nodes, std::int64_t count, int op) {
    switch (op) {
        case 0: return allreduce<T, Sum>(buffers, nodes, count);
        case 1: return allreduce<T, Prod>(buffers, nodes, count);
        case 2: return allreduce<T, Max>(buffers, nodes, count);
        case 3: return allreduce<T, Min>(buffers, nodes, count);
        case 4: return allreduce<T, Avg>(buffers, nodes, count);
        default: return SEED_BAD_DTYPE_OR_OP;
    }
}

}  // namespace

extern "C" {

int seed_allreduce(void** buffers, int nodes, std::int64_t count, int dtype, int op) {
    if (buffers == nullptr || nodes < 1 || count < 0) return SEED_BAD_ARGUMENT;
    for (int node = 0; node < nodes; ++node)
        if (buffers[node] == nullptr && count > 0) return SEED_BAD_ARGUMENT;
    // No C++ exception may cross into the caller (Python, through ctypes).
    try {
        switch (dtype) {
            case 0: return with_op<float>(buffers, nodes, count, op);
            case 1: return with_op<double>(buffers, nodes, count, op);
            case 2: return with_op<std::int32_t>(buffers, nodes, count, op);
            case 3: return with_op<std::int64_t>(buffers, nodes, count, op);
            default: return SEED_BAD_DTYPE_OR_OP;
        }
    } catch (...) {
        return SEED_OUT_OF_RESOURCES;
    }
}

void seed_chunk_range(std::int64_t total, std::int64_t chunks, std::int64_t index,
                      std::int64_t* start, std::int64_t* stop) {
    const Range r = chunk_range(total, chunks, index);
    *start = r.start;
    *stop = r.stop;
}

}  // extern "C"
