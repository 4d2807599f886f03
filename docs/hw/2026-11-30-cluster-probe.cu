#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) cl2(unsigned *out) {
    cg::cluster_group c = cg::this_cluster();
    out[blockIdx.x] = c.block_rank() + 10 + 100 * c.num_blocks();
}
extern "C" __global__ void __cluster_dims__(4, 1, 1) cl4(unsigned *out) {
    cg::cluster_group c = cg::this_cluster();
    out[blockIdx.x] = c.block_rank() + 10 + 100 * c.num_blocks();
}
extern "C" __global__ void __cluster_dims__(2, 2, 1) cl22(unsigned *out) {
    cg::cluster_group c = cg::this_cluster();
    out[blockIdx.y * gridDim.x + blockIdx.x] = c.block_rank() + 10 + 100 * c.num_blocks();
}
// Distributed shared memory: each block writes its rank into its shared word, then reads its
// neighbour's through the cluster.
extern "C" __global__ void __cluster_dims__(2, 1, 1) dsmem(unsigned *out) {
    __shared__ unsigned word;
    cg::cluster_group c = cg::this_cluster();
    if (threadIdx.x == 0) word = 1000 + blockIdx.x;
    c.sync();
    unsigned *peer = c.map_shared_rank(&word, c.block_rank() ^ 1);
    if (threadIdx.x == 0) out[blockIdx.x] = *peer;
    c.sync();
}
