/*
 * The idle gate's readings on the cuda backend: NVML, loaded at run time
 * from libnvidia-ml.so.1 (libs.c), with the few prototypes it needs
 * declared here by hand (no nvml.h is installed where shardd builds).  A
 * CUDA device is found in NVML by its PCI bus id, so that CUDA's and
 * NVML's device orders may differ (CUDA_VISIBLE_DEVICES).
 *
 * The process list may not show this process: in a container the driver
 * reports the host's pids.  When this process has used the device and its
 * pid is not in the list, the largest entry is taken to be this process
 * (the other entries, if any, still count as others, so the gate errs on
 * the side of "busy").
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"

/* NVML's types and values this file uses (NVML API reference). */
typedef int nvml_return;                 /* nvmlReturn_t; 0: success */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
struct nvml_utilization {                /* nvmlUtilization_t */
    unsigned int gpu;
    unsigned int memory;
};
struct nvml_memory { /* nvmlMemory_t (v1) */
    unsigned long long total, free, used;
};
/* nvmlProcessInfo_v2_t: what nvmlDeviceGetComputeRunningProcesses_v3
 * fills. */
struct nvml_process {
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id;
    unsigned int compute_instance_id;
};
#define NVML_SUCCESS                 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     ULLONG_MAX
#define NVML_MAX_PROCS               64

/* NVML's entry points, in libs.c's order. */
struct nvml_fns {
    nvml_return (*init)(void);
    const char *(*error_string)(nvml_return r);
    nvml_return (*handle_by_pci)(const char *bus_id, nvml_device *dev);
    nvml_return (*utilization)(nvml_device dev, struct nvml_utilization *u);
    nvml_return (*memory)(nvml_device dev, struct nvml_memory *m);
    nvml_return (*processes)(nvml_device dev, unsigned int *count,
                             struct nvml_process *infos);
};
_Static_assert(sizeof(struct nvml_fns) == 6 * sizeof(void *), "libs.c's order");

static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static struct nvml_fns nvml;
static int nvml_rv;
static char nvml_why[sizeof(((struct sd_diag *)0)->msg)];

static void nvml_start(void)
{
    void *const *syms;
    struct sd_diag d;
    nvml_return r;

    nvml_rv = kern_cuda__lib(KERN_LIB_NVML, &syms, &d);
    if (nvml_rv != 0) {
        memcpy(nvml_why, d.msg, sizeof(nvml_why));
        return;
    }
    memcpy(&nvml, syms, sizeof(nvml));
    r = nvml.init();
    if (r != NVML_SUCCESS) {
        nvml_rv = SD_EUNSUPPORTED;
        snprintf(nvml_why, sizeof(nvml_why), "nvml: nvmlInit: %s",
                 nvml.error_string(r));
    }
}

/* An NVML failure as SD_EDEVICE, naming the call. */
static int nvml_fail(struct sd_diag *d, nvml_return r, const char *what)
{
    return sd_diag_set(d, SD_EDEVICE, "nvml: %s: %s", what,
                       nvml.error_string(r));
}

/* Fills the process part of out from NVML's list. */
static void read_processes(nvml_device dev, int32_t device,
                           struct kern_device_load *out)
{
    struct nvml_process p[NVML_MAX_PROCS];
    unsigned int n = NVML_MAX_PROCS, i, big = 0;
    unsigned int self = (unsigned int)getpid();
    bool used_here = kern_cuda__idle_ms(device) != INT64_MAX;
    int32_t others = 0;
    nvml_return r;

    memset(p, 0, sizeof(p));
    r = nvml.processes(dev, &n, p);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        out->other_procs = (int32_t)(n < INT32_MAX ? n : INT32_MAX);
        return; /* more than NVML_MAX_PROCS: busy whoever they are */
    }
    if (r != NVML_SUCCESS) {
        out->other_procs = -1; /* not supported: nobody can tell */
        return;
    }
    for (i = 0; i < n; i++) {
        if (p[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE)
            p[i].used_gpu_memory = 0;
        if (p[i].pid == self) {
            out->own_seen = true;
            out->own_mem_bytes = p[i].used_gpu_memory;
            continue;
        }
        if (p[i].used_gpu_memory > p[big].used_gpu_memory || p[big].pid == self)
            big = i;
    }
    for (i = 0; i < n; i++) {
        if (p[i].pid == self)
            continue;
        /* Unseen, this process is presumably the largest entry. */
        if (!out->own_seen && used_here && i == big) {
            out->own_mem_bytes = p[i].used_gpu_memory;
            continue;
        }
        if (others++ == 0)
            out->other_pid = p[i].pid;
        out->other_mem_bytes += p[i].used_gpu_memory;
    }
    out->other_procs = others;
}

int kern_cuda_device_load(int32_t device, struct kern_device_load *out,
                          struct sd_diag *d)
{
    struct nvml_utilization u;
    struct nvml_memory m;
    char bus[32];
    nvml_device dev;
    nvml_return r;

    pthread_once(&nvml_once, nvml_start);
    if (nvml_rv != 0)
        return sd_diag_set(d, nvml_rv, "%s", nvml_why);
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), device) != cudaSuccess) {
        (void)cudaGetLastError();
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "nvml: no PCI bus id for cuda device %d",
                           (int)device);
    }
    r = nvml.handle_by_pci(bus, &dev);
    if (r != NVML_SUCCESS)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "nvml: no device at PCI bus %s: %s", bus,
                           nvml.error_string(r));
    memset(out, 0, sizeof(*out));
    r = nvml.utilization(dev, &u);
    if (r != NVML_SUCCESS)
        return nvml_fail(d, r, "utilization");
    r = nvml.memory(dev, &m);
    if (r != NVML_SUCCESS)
        return nvml_fail(d, r, "memory");
    out->util_pct = (double)u.gpu;
    out->mem_used_bytes = m.used;
    out->mem_total_bytes = m.total;
    out->own_idle_ms = kern_cuda__idle_ms(device);
    read_processes(dev, device, out);
    return 0;
}
