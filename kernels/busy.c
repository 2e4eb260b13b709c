/*
 * The idle gate (kernels.h): whether another user has a device now, from
 * the backend's readings (NVML on cuda), so that the daemon's profiler
 * measures only an idle device and never slows someone else's job.  The
 * decision is a pure function of the readings, tested without a device.
 */
#include <stdio.h>

#include "kern_internal.h"

void kern_busy_limits_default(struct kern_busy_limits *l)
{
    l->max_util_pct = 10;
    l->max_mem_frac = 0.10;
    l->min_own_idle_ms = 2000;
}

bool kern_busy_decide(const struct kern_device_load *l,
                      const struct kern_busy_limits *lim, char *why, size_t cap)
{
    uint64_t others;
    char tmp[8];

    if (why == NULL || cap == 0) {
        why = tmp;
        cap = sizeof(tmp);
    }
    why[0] = '\0';
    if (l->other_procs > 0) {
        snprintf(why, cap,
                 "%d other process%s on the device (pid %u, %llu MiB)",
                 (int)l->other_procs, l->other_procs == 1 ? "" : "es",
                 (unsigned)l->other_pid,
                 (unsigned long long)(l->other_mem_bytes >> 20));
        return true;
    }
    others = l->mem_used_bytes > l->own_mem_bytes
                 ? l->mem_used_bytes - l->own_mem_bytes
                 : 0;
    if (l->mem_total_bytes > 0 &&
        (double)others > lim->max_mem_frac * (double)l->mem_total_bytes) {
        snprintf(why, cap,
                 "%llu of %llu MiB of device memory used by others (limit "
                 "%.0f%%)",
                 (unsigned long long)(others >> 20),
                 (unsigned long long)(l->mem_total_bytes >> 20),
                 100 * lim->max_mem_frac);
        return true;
    }
    if (l->own_idle_ms >= lim->min_own_idle_ms &&
        l->util_pct > lim->max_util_pct) {
        snprintf(why, cap,
                 "device %.0f%% busy while this process left it idle "
                 "(limit %.0f%%)",
                 l->util_pct, lim->max_util_pct);
        return true;
    }
    return false;
}

int kern_device_load(const struct kern_backend *be, int32_t device,
                     struct kern_device_load *out, struct sd_diag *d)
{
    if (be == NULL || be->device_load == NULL)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "device load: the %s backend cannot tell",
                           be != NULL ? be->name : "(none)");
    if (device < 0 || device >= be->device_count())
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "device load: the %s backend has no device %d",
                           be->name, (int)device);
    return be->device_load(device, out, d);
}

bool kern_device_busy(const struct kern_backend *be, int32_t device, char *why,
                      size_t cap)
{
    struct kern_busy_limits lim;
    struct kern_device_load l;

    if (why != NULL && cap > 0)
        why[0] = '\0';
    if (kern_device_load(be, device, &l, NULL) != 0)
        return false;
    kern_busy_limits_default(&lim);
    return kern_busy_decide(&l, &lim, why, cap);
}
