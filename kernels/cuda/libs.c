/*
 * The libraries the cuda backend loads at run time rather than links:
 * cuBLAS, NCCL and NVML.  A binary built with CUDA links only the static
 * CUDA runtime, so it starts, and plans, on hosts without a GPU or these
 * libraries (reference/style.md 3.6 rule 7); a library is opened the
 * first time an op needs it, every symbol resolved at once, and the
 * outcome (the handle, or why not) kept for the life of the process.
 * Nothing is ever unloaded.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define LIB_MAX_SYMS 16

struct lib {
    const char *soname;       /* what dlopen() looks for */
    const char *env;          /* a path that overrides it */
    const char *const *names; /* symbols, NULL-terminated */
    pthread_once_t once;
    void *syms[LIB_MAX_SYMS];
    int rv;
    char why[400];
};

static const char *const cublas_names[] = {
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSetMathMode",
    "cublasSgemm_v2",
    "cublasGetStatusName",
    NULL,
};
static const char *const nccl_names[] = {
    "ncclGetVersion",
    "ncclCommInitAll",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclGetErrorString",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclSend",
    "ncclRecv",
    "ncclAllReduce",
    "ncclReduceScatter",
    "ncclAllGather",
    NULL,
};
static const char *const nvml_names[] = {
    "nvmlInit_v2",
    "nvmlErrorString",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    NULL,
};

static struct lib libs[] = {
    [KERN_LIB_CUBLAS] = {"libcublas.so.13",
                         "SHARDD_CUBLAS_LIB",
                         cublas_names,
                         PTHREAD_ONCE_INIT,
                         {0},
                         0,
                         ""},
    [KERN_LIB_NCCL] = {"libnccl.so.2",
                       "SHARDD_NCCL_LIB",
                       nccl_names,
                       PTHREAD_ONCE_INIT,
                       {0},
                       0,
                       ""},
    [KERN_LIB_NVML] = {"libnvidia-ml.so.1",
                       "SHARDD_NVML_LIB",
                       nvml_names,
                       PTHREAD_ONCE_INIT,
                       {0},
                       0,
                       ""},
};

static void load(struct lib *l)
{
    const char *path = getenv(l->env), *err;
    void *h;
    size_t i;

    if (path == NULL || path[0] == '\0')
        path = l->soname;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        err = dlerror();
        l->rv = SD_EUNSUPPORTED;
        snprintf(l->why, sizeof(l->why), "%s: %s (set $%s to its path)", path,
                 err != NULL ? err : "cannot load", l->env);
        return;
    }
    for (i = 0; l->names[i] != NULL; i++) {
        l->syms[i] = dlsym(h, l->names[i]);
        if (l->syms[i] == NULL) {
            l->rv = SD_EUNSUPPORTED;
            snprintf(l->why, sizeof(l->why), "%s: no symbol %s (too old?)",
                     path, l->names[i]);
            return; /* the handle stays open: harmless, and never reused */
        }
    }
    l->rv = 0;
    snprintf(l->why, sizeof(l->why), "%s", path);
}

static void load_cublas(void)
{
    load(&libs[KERN_LIB_CUBLAS]);
}

static void load_nccl(void)
{
    load(&libs[KERN_LIB_NCCL]);
}

static void load_nvml(void)
{
    load(&libs[KERN_LIB_NVML]);
}

int kern_cuda__lib(enum kern_cuda_lib lib, void *const **syms,
                   struct sd_diag *d)
{
    static void (*const loaders[])(void) = {
        [KERN_LIB_CUBLAS] = load_cublas,
        [KERN_LIB_NCCL] = load_nccl,
        [KERN_LIB_NVML] = load_nvml,
    };
    struct lib *l = &libs[lib];

    pthread_once(&l->once, loaders[lib]);
    if (l->rv != 0)
        return sd_diag_set(d, l->rv, "%s", l->why);
    if (syms != NULL)
        *syms = l->syms;
    if (d != NULL)
        snprintf(d->msg, sizeof(d->msg), "%s", l->why);
    return 0;
}

int kern__cuda_lib_probe(const char *name, struct sd_diag *d)
{
    enum kern_cuda_lib lib = KERN_LIB_NVML;

    if (strcmp(name, "cublas") == 0)
        lib = KERN_LIB_CUBLAS;
    else if (strcmp(name, "nccl") == 0)
        lib = KERN_LIB_NCCL;
    return kern_cuda__lib(lib, NULL, d);
}
