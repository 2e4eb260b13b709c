/*
 * Devices: topologies and their checks, optimizers, and the bytes a table's
 * columns need in a device's memory (problem.h).
 */
#include <math.h>
#include <string.h>

#include "problem/problem.h"

#define GIB ((double)(1ull << 30))

/* TorchRec's constants (torchrec_planner.md 1.5): X GiB/s as bytes per ms. */
#define BW_INTRA_HOST (600.0 * GIB / 1000.0)
#define BW_INTER_HOST (12.5 * GIB / 1000.0)
#define BW_DEVICE_MEM (897.0 * GIB / 1000.0)

void topology_default(struct topology *t, int32_t ndevices, uint64_t mem_bytes)
{
    memset(t, 0, sizeof(*t));
    t->ndevices = ndevices;
    t->devices_per_host = ndevices;
    t->mem_bytes = mem_bytes;
    t->batch_size = 65536;
    t->intra_host_bw = BW_INTRA_HOST;
    t->inter_host_bw = BW_INTER_HOST;
    t->link_latency_ms = 0.01;
    t->device_mem_bw = BW_DEVICE_MEM;
}

/* A bandwidth within [TOPO_BW_MIN, TOPO_BW_MAX] (NaN is not). */
static bool sane_bw(double x)
{
    return x >= TOPO_BW_MIN && x <= TOPO_BW_MAX;
}

int topology_validate(const struct topology *t, struct sd_diag *d)
{
    if (t->ndevices < 1 || t->ndevices > TOPO_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: devices %d is not in [1, %d]",
                           (int)t->ndevices, TOPO_DEVICES_MAX);
    if (t->devices_per_host < 1 || t->devices_per_host > t->ndevices ||
        t->ndevices % t->devices_per_host != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: devices_per_host %d does not divide "
                           "devices %d",
                           (int)t->devices_per_host, (int)t->ndevices);
    if (t->mem_by_device != NULL) {
        int32_t r;

        for (r = 0; r < t->ndevices; r++)
            if (t->mem_by_device[r] == 0)
                return sd_diag_set(d, SD_EINVAL,
                                   "topology: device %d: mem_bytes is 0",
                                   (int)r);
    } else if (t->mem_bytes == 0) {
        return sd_diag_set(d, SD_EINVAL, "topology: mem_bytes is 0");
    }
    if (t->batch_size < t->ndevices || t->batch_size > (int64_t)1 << 30)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: batch_size %lld is not in [devices, "
                           "2^30]",
                           (long long)t->batch_size);
    if (!sane_bw(t->intra_host_bw) || !sane_bw(t->inter_host_bw) ||
        !sane_bw(t->device_mem_bw))
        return sd_diag_set(d, SD_EINVAL,
                           "topology: intra_host_bw %g, inter_host_bw %g, "
                           "device_mem_bw %g: each must be in [%g, %g] "
                           "bytes/ms",
                           t->intra_host_bw, t->inter_host_bw, t->device_mem_bw,
                           TOPO_BW_MIN, TOPO_BW_MAX);
    if (!(t->link_latency_ms >= 0 && t->link_latency_ms <= TOPO_LATENCY_MAX))
        return sd_diag_set(d, SD_EINVAL,
                           "topology: link_latency_ms %g is not in [0, %g]",
                           t->link_latency_ms, TOPO_LATENCY_MAX);
    if (!(t->host_link_bw == 0 || sane_bw(t->host_link_bw)))
        return sd_diag_set(d, SD_EINVAL,
                           "topology: host_link_bw %g is not 0 (the default) "
                           "or in [%g, %g] bytes/ms",
                           t->host_link_bw, TOPO_BW_MIN, TOPO_BW_MAX);
    if (t->comm_dtype != TABLE_DTYPE_FP32 &&
        t->comm_dtype != TABLE_DTYPE_FP16 && t->comm_dtype != TABLE_DTYPE_BF16)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: comm_dtype %d is not fp32, fp16 or bf16",
                           (int)t->comm_dtype);
    return 0;
}

const char *topology_more_memory(const struct topology *t)
{
    return t->host_dram_bytes > 0 ? "give the devices more memory"
                                  : "give the devices more memory, or the "
                                    "hosts DRAM for the UVM tier";
}

uint64_t topology_mem_max(const struct topology *t)
{
    uint64_t m = 0;
    int32_t r;

    if (t->mem_by_device == NULL)
        return t->mem_bytes;
    for (r = 0; r < t->ndevices; r++)
        if (t->mem_by_device[r] > m)
            m = t->mem_by_device[r];
    return m;
}

static const char *const optimizer_names[] = {
    [OPTIMIZER_SGD] = "sgd",
    [OPTIMIZER_ADAGRAD] = "adagrad",
    [OPTIMIZER_ROWWISE_ADAGRAD] = "rowwise_adagrad",
    [OPTIMIZER_ADAM] = "adam",
};

int optimizer_parse(const char *s, enum optimizer *out)
{
    size_t i;

    for (i = 0; i < sizeof(optimizer_names) / sizeof(optimizer_names[0]); i++) {
        if (strcmp(s, optimizer_names[i]) == 0) {
            *out = (enum optimizer)i;
            return 0;
        }
    }
    return SD_EINVAL;
}

const char *optimizer_name(enum optimizer o)
{
    return (unsigned)o < sizeof(optimizer_names) / sizeof(optimizer_names[0])
               ? optimizer_names[o]
               : "unknown";
}

/* Weights plus optimizer state of `cols` columns of `rows` rows of dtype,
 * wherever they are. */
static uint64_t full_bytes(int64_t rows, int32_t cols, enum table_dtype dtype,
                           enum optimizer opt)
{
    uint64_t w = (uint64_t)rows * table_row_bytes(dtype, cols);

    switch (opt) {
    case OPTIMIZER_ADAGRAD:
        return 2 * w;
    case OPTIMIZER_ROWWISE_ADAGRAD:
        return w + (uint64_t)rows * table_dtype_size(dtype);
    case OPTIMIZER_ADAM:
        return 3 * w;
    case OPTIMIZER_SGD:
    default:
        return w;
    }
}

/* Of `all` bytes in a tier, those in HBM: none in UVM, the cache's share
 * cached. */
static uint64_t hbm_part(uint64_t all, uint8_t tier, float load_factor)
{
    switch (tier) {
    case TIER_UVM:
        return 0;
    case TIER_UVM_CACHING:
        return (uint64_t)ceil((double)all * (double)load_factor);
    default:
        return all;
    }
}

uint64_t shard_bytes(const struct table *t, int32_t cols, enum optimizer opt)
{
    return hbm_part(full_bytes(t->rows, cols, t->dtype, opt), t->tier,
                    t->cache_load_factor);
}

uint64_t shard_ddr_bytes(const struct table *t, int32_t cols,
                         enum optimizer opt)
{
    return t->tier == TIER_HBM ? 0 : full_bytes(t->rows, cols, t->dtype, opt);
}

/* A shard's block is its rows under the shard's tier where it has one, the
 * table's otherwise; read from the fields, not a copy of the table (the
 * copies were a third of an ensemble's spread over a plan). */
uint64_t shard_block_bytes(const struct table *t, const struct shard *s,
                           enum optimizer opt)
{
    bool own = s->tier != TIER_HBM;

    return hbm_part(full_bytes(shard_rows(t, s), s->col_width, t->dtype, opt),
                    own ? s->tier : t->tier,
                    own ? s->cache_load_factor : t->cache_load_factor);
}

uint64_t shard_block_ddr_bytes(const struct table *t, const struct shard *s,
                               enum optimizer opt)
{
    uint8_t tier = s->tier != TIER_HBM ? s->tier : t->tier;

    return tier == TIER_HBM
               ? 0
               : full_bytes(shard_rows(t, s), s->col_width, t->dtype, opt);
}

double topology_host_link_bw(const struct topology *t)
{
    return t->host_link_bw > 0 ? t->host_link_bw : TOPO_HOST_LINK_BW;
}

double topology_comm_esz(const struct topology *t)
{
    return t->comm_dtype == TABLE_DTYPE_FP16 ||
                   t->comm_dtype == TABLE_DTYPE_BF16
               ? 2.0
               : 4.0;
}
